package client

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAdmissionFromTellsAProbeFromAnOrdinaryCall(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy()) // trips after 2 failures, opens 100 ms
	fail := reply{status: http.StatusInternalServerError, body: `{"error":{"type":"server_error"}}`}
	prov := newProvider(t, fail, fail, reply{status: http.StatusOK, body: "ok"})
	c := newClient(t, cd.URL, WithMaxRetries(5), WithBackoff(150*time.Millisecond, 150*time.Millisecond))
	cn := conn(t, c, prov.URL, "key-1", "")

	_, ok := AdmissionFrom(t.Context())
	assert.False(t, ok, "a context that does not come from a guard")
	var got []Decision
	resp, err := c.Do(t.Context(), cn, func(ctx context.Context) (*http.Response, error) {
		a, ok := AdmissionFrom(ctx)
		require.True(t, ok)
		assert.Equal(t, cn, a.Conn)
		if a.Decision == DecisionAllowProbe {
			assert.NotEmpty(t, a.LeaseToken)
		}
		got = append(got, a.Decision)
		return prov.get()(ctx)
	})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, []Decision{DecisionAllow, DecisionAllow, DecisionAllowProbe}, got,
		"two calls trip the breaker; the call after the open is the probe")
}
