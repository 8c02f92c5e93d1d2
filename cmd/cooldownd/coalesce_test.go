package main

import (
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// TestCoalesceIntervalFlag: --coalesce-interval is off by default and 0
// or in [10ms, 5s].
func TestCoalesceIntervalFlag(t *testing.T) {
	t.Parallel()
	c, err := parseConfig(nil, envOf(nil), io.Discard)
	require.NoError(t, err)
	assert.Zero(t, c.coalesce, "off by default")
	for _, tc := range []struct {
		arg string
		ok  bool
	}{{"0", true}, {"10ms", true}, {"250ms", true}, {"5s", true}, {"5ms", false}, {"6s", false}, {"-1s", false}} {
		t.Run(tc.arg, func(t *testing.T) {
			t.Parallel()
			c, err := parseConfig([]string{"--coalesce-interval=" + tc.arg}, envOf(nil), io.Discard)
			if tc.ok {
				require.NoError(t, err)
				want, err := time.ParseDuration(tc.arg)
				require.NoError(t, err)
				assert.Equal(t, want, c.coalesce)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "--coalesce-interval")
		})
	}
}

// TestStopAppliesCoalescedSuccesses: a cooldownd with a coalescing
// interval longer than the test holds a healthy connection's success (it
// answers COALESCED, Redis does not count it yet), and SIGTERM's stop
// applies it before run returns: nothing acknowledged is lost on a clean
// stop. Fails if the stop does not flush (the count stays at 1).
func TestStopAppliesCoalescedSuccesses(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	in := start(t, "--addr", "127.0.0.1:0", "--redis-url", "redis://"+srv.Addr+"/4", "--coalesce-interval", "5s")
	c := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url())
	id := newID(0xc6)
	ok := &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id}, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200}
	first, err := c.Report(t.Context(), connect.NewRequest(ok))
	require.NoError(t, err)
	ok.Revision, ok.Count = first.Msg.GetRevision(), 41
	held, err := c.Report(t.Context(), connect.NewRequest(ok))
	require.NoError(t, err)
	require.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED, held.Msg.GetApplied())

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 4})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	var kid keys.ID
	copy(kid[:], id)
	successes := func() int64 {
		snap, _, err := st.Get(t.Context(), "default", kid, 0)
		require.NoError(t, err)
		return snap.State.Successes
	}
	require.Equal(t, int64(1), successes(), "held, not applied yet")
	require.NoError(t, in.stop(t)) // within 5 s: before the interval ends
	assert.Equal(t, int64(42), successes(), "applied on the stop")
}
