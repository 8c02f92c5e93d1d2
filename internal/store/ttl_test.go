package store_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// cmdCalls is how many times Redis ran one command (INFO commandstats).
func cmdCalls(t *testing.T, rdb *redis.Client, name string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls=")
		if ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// TestHealthyReportRefreshesTTLWhenDue: a healthy connection's successes
// rewrite its keys' expiry only when less than the idle TTL is left (then
// to the idle TTL and an eighth), so the keys always outlive the last
// report by at least the idle TTL while most reports issue no PEXPIRE.
func TestHealthyReportRefreshesTTLWhenDue(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	ctx := context.Background()
	idle := time.Hour
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st, err := store.New(rdb, store.Options{IdleTTL: idle, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	c := store.Conn{Tenant: "ttl", ID: keys.ID{7}}
	l := keys.Layout{Tenant: c.Tenant, ID: c.ID}
	// A trip and a reset give the connection a history whose TTL must move
	// with the state's.
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeAuthFailure})
	require.NoError(t, err)
	_, err = st.Reset(ctx, c.Tenant, c.ID, "test", "ttl")
	require.NoError(t, err)
	expiresAt := func() int64 {
		n, err := rdb.HGet(ctx, l.State(), "xp").Int64()
		require.NoError(t, err)
		return n
	}
	require.Equal(t, now.Add(idle).UnixMilli(), expiresAt(), "the reset set the keys' expiry to the idle TTL")

	success := func() {
		t.Helper()
		res, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200, Revision: revision(t, st, c)})
		require.NoError(t, err)
		require.True(t, res.Accepted)
	}
	steps := []struct {
		name    string
		advance time.Duration
		refresh bool
	}{
		{"less than the idle TTL left", time.Millisecond, true},
		{"just refreshed", time.Minute, false},
		{"an eighth less one ms later", idle/8 - time.Minute - time.Millisecond, false},
		{"an eighth later", 2 * time.Millisecond, true},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		before, beforeCalls := expiresAt(), cmdCalls(t, rdb, "pexpire")
		success()
		calls := cmdCalls(t, rdb, "pexpire") - beforeCalls
		if s.refresh {
			assert.Equal(t, now.Add(idle+idle/8).UnixMilli(), expiresAt(), s.name)
			assert.Equal(t, int64(2), calls, "%s: state and history", s.name)
			for _, k := range []string{l.State(), l.History()} {
				ttl := rdb.PTTL(ctx, k).Val()
				assert.Greater(t, ttl, idle, "%s: %s", s.name, k)
				assert.LessOrEqual(t, ttl, idle+idle/8, "%s: %s", s.name, k)
			}
		} else {
			assert.Equal(t, before, expiresAt(), s.name)
			assert.Zero(t, calls, s.name)
		}
		assert.GreaterOrEqual(t, expiresAt()-now.UnixMilli(), idle.Milliseconds(), "%s: at least the idle TTL left", s.name)
	}
}

func revision(t *testing.T, st *store.Store, c store.Conn) uint64 {
	t.Helper()
	snap, _, err := st.Get(context.Background(), c.Tenant, c.ID, 0)
	require.NoError(t, err)
	return snap.State.Revision
}
