package server_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/logtest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// TestStoreErrorsSayWhatHappened: a key of the wrong type is a bug, not an
// outage: it answers internal (clients do not degrade), and its cause is
// logged once per interval however many requests meet it. A Redis that is
// gone answers unavailable.
func TestStoreErrorsSayWhatHappened(t *testing.T) {
	t.Parallel()
	logs := &logtest.Buffer{}
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ts := servertest.Start(t, servertest.WithProtocol(servertest.HTTP1),
		servertest.WithRedisOptions(func(ro *redis.Options) { ro.MaxRetries, ro.DialerRetries = -1, 1 }),
		servertest.WithServerOptions(func(so *server.Options) { so.Logger, so.Now = slog.New(slog.NewTextHandler(logs, nil)), clock }))
	m, hs := ts.Mini, ts.HTTP()
	c := cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL)
	ctx := context.Background()

	raw := newID()
	id, err := keys.IDFromBytes(raw)
	require.NoError(t, err)
	require.NoError(t, m.Set(keys.Layout{Tenant: keys.DefaultTenant, ID: id}.State(), "not a hash"))
	for range 3 {
		_, err := c.Admit(ctx, admitReq(raw))
		requireCode(t, err, connect.CodeInternal)
		assert.NotContains(t, err.Error(), "cd:{", "no key names on the wire")
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "state store error"), "logged once:\n%s", logs)
	assert.Contains(t, logs.String(), "WRONGTYPE", "with its cause")

	mu.Lock()
	now = now.Add(11 * time.Second)
	mu.Unlock()
	_, err = c.Admit(ctx, admitReq(raw))
	requireCode(t, err, connect.CodeInternal)
	assert.Equal(t, 2, strings.Count(logs.String(), "state store error"), "again after the interval")
	assert.Contains(t, logs.String(), "suppressed_since_last=2")

	m.Close()
	_, err = c.Admit(ctx, admitReq(newID()))
	requireCode(t, err, connect.CodeUnavailable, "state store unavailable")
	assert.Contains(t, logs.String(), "state store unavailable")
}
