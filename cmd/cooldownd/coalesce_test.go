package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
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

// TestCoalescePeerFlags: routing needs coalescing, a token file and a
// host:port; its other flags need the address.
func TestCoalescePeerFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string // "" : accepted
	}{
		{"routing", []string{"--coalesce-interval=250ms", "--coalesce-peer-address=10.1.2.3:8080", "--coalesce-peer-token-file=/t"}, ""},
		{"without coalescing", []string{"--coalesce-peer-address=10.1.2.3:8080", "--coalesce-peer-token-file=/t"}, "needs --coalesce-interval"},
		{"without a token", []string{"--coalesce-interval=250ms", "--coalesce-peer-address=10.1.2.3:8080"}, "needs --coalesce-peer-token-file"},
		{"no port", []string{"--coalesce-interval=250ms", "--coalesce-peer-address=10.1.2.3", "--coalesce-peer-token-file=/t"}, "host:port"},
		{"no host", []string{"--coalesce-interval=250ms", "--coalesce-peer-address=:8080", "--coalesce-peer-token-file=/t"}, "host:port"},
		{"port 0", []string{"--coalesce-interval=250ms", "--coalesce-peer-address=10.1.2.3:0", "--coalesce-peer-token-file=/t"}, "host:port"},
		{"a token without an address", []string{"--coalesce-interval=250ms", "--coalesce-peer-token-file=/t"}, "need --coalesce-peer-address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseConfig(tc.args, envOf(nil), io.Discard)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestRoutedReplicas: two cooldownd with --coalesce-peer-address on one
// Redis register as peers, take each other's batches, and on a clean stop
// each leaves the peers and applies what it holds: every acknowledged
// success is counted once both have stopped. Fails if a stop loses what
// a peer routed to it or if a stopped replica stays registered.
func TestRoutedReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	tok := filepath.Join(t.TempDir(), "peer-token")
	require.NoError(t, os.WriteFile(tok, []byte("routed-replicas-test-token\n"), 0o600))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 5})
	t.Cleanup(func() { _ = rdb.Close() })
	var ins []*instance
	for range 2 {
		addr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
		ins = append(ins, start(t, "--addr", addr, "--redis-url", "redis://"+srv.Addr+"/5", "--coalesce-interval", "100ms",
			"--coalesce-peer-address", addr, "--coalesce-peer-token-file", tok))
	}
	require.Eventually(t, func() bool {
		n, err := rdb.ZCard(t.Context(), keys.Peers).Result()
		return err == nil && n == 2
	}, 10*time.Second, 20*time.Millisecond, "both registered")
	id := newID(0xc7)
	var kid keys.ID
	copy(kid[:], id)
	want := int64(0)
	for i, in := range ins {
		c := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url())
		req := &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id}, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200}
		first, err := c.Report(t.Context(), connect.NewRequest(req))
		require.NoError(t, err)
		req.Revision, req.Count = first.Msg.GetRevision(), uint32(10*(i+1))
		for range 20 {
			_, err := c.Report(t.Context(), connect.NewRequest(req))
			require.NoError(t, err)
		}
		want += 1 + 20*int64(req.Count)
	}
	for _, in := range ins {
		require.NoError(t, in.stop(t))
	}
	n, err := rdb.ZCard(t.Context(), keys.Peers).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "both left the peers")
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	snap, _, err := st.Get(t.Context(), "default", kid, 0)
	require.NoError(t, err)
	assert.Equal(t, want, snap.State.Successes, "every acknowledged success counted once")
}
