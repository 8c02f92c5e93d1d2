package store_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
	"github.com/cooldownd/cooldownd/internal/store/schema"
)

// storedFields is a state hash's fields, and whether any holds a value
// that load reads as the default anyway (0, or ”).
func storedFields(ctx context.Context, t *testing.T, rdb *redis.Client, c store.Conn) (names []string, defaults []string) {
	t.Helper()
	m, err := rdb.HGetAll(ctx, keys.Layout{Tenant: c.Tenant, ID: c.ID}.State()).Result()
	require.NoError(t, err)
	for k, v := range m {
		if k != "ph" && (v == "0" || v == "") {
			defaults = append(defaults, k)
		}
	}
	return slices.Sorted(maps.Keys(m)), defaults
}

// TestIdleStateStoresOnlyWhatIsNotDefault: a healthy connection's state
// hash holds the phase and the fields whose value is not their default,
// and the fleet window's counts only for the rules that are on (decision
// 0053): whatever wrote it (the full script that created it, the fast
// path after). It fails on the scripts that stored every field (32 of them
// for the default policy, most of them 0).
func TestIdleStateStoresOnlyWhatIsNotDefault(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	ctx := context.Background()
	off, throttle := breaker.DefaultPolicy(), breaker.DefaultPolicy()
	off.RetryBudget = 0
	throttle.ThrottleK = 2
	base := []string{"lo", "ls", "ph", "sc", "uat", "wcc", "ws", "xp"}
	for i, tc := range []struct {
		name   string
		policy breaker.Policy
		want   []string
	}{
		{"default policy: the retry budget counts first attempts", breaker.DefaultPolicy(), append(slices.Clone(base), "fcf", "fs")},
		{"every fleet rule off: no fleet count", off, base},
		{"throttle on: its requests and accepts too", throttle, append(slices.Clone(base), "fca", "fcf", "fcq", "fs")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.policy
			// A clock one millisecond on at each call: with Redis TIME two
			// calls in the same millisecond left the second success with
			// exactly the idle TTL, so it did not refresh it and the third
			// did (a flake in a fresh-clone CI run).
			now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
			clock := func() time.Time {
				now = now.Add(time.Millisecond)
				return now
			}
			st, err := store.New(rdb, store.Options{Policy: &p, Clock: clock})
			require.NoError(t, err)
			c := store.Conn{Tenant: "compact", ID: keys.ID{byte(i + 1)}}
			for n := range 3 {
				_, err := st.Admit(ctx, c)
				require.NoError(t, err)
				expires := cmdCalls(t, rdb, "pexpire")
				res, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
				require.NoError(t, err)
				require.True(t, res.Accepted)
				if n > 1 {
					// The full script sets the keys' time to live on every
					// save; the fast path only when less than the idle TTL
					// is left (the second success, after the create's
					// idle TTL), then an eighth more: the third success
					// on the compact state takes the fast path.
					assert.Equal(t, expires, cmdCalls(t, rdb, "pexpire"), "success %d took the full script", n+1)
				}
				names, defaults := storedFields(ctx, t, rdb, c)
				assert.Equal(t, slices.Sorted(slices.Values(tc.want)), names, "after success %d", n+1)
				assert.Empty(t, defaults, "after success %d: fields stored at their default", n+1)
			}
		})
	}
}

// TestStateFieldsBackToTheirDefaultAreDeleted: a field whose value goes
// back to its default is deleted, on the fast path (a success after a
// failure, a window rotated by a success) as on the full script, and the
// model's state read back is the same either way. It fails on the scripts
// that wrote 0 and ”.
func TestStateFieldsBackToTheirDefaultAreDeleted(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := breaker.DefaultPolicy()
	st, err := store.New(rdb, store.Options{Policy: &p, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	c := store.Conn{Tenant: "compact", ID: keys.ID{0xd0}}
	report := func(r breaker.Report) {
		t.Helper()
		_, err := st.Report(ctx, c, r)
		require.NoError(t, err)
	}
	fail := breaker.Report{Outcome: breaker.OutcomeTransientFailure, HTTPStatus: 500, ErrorCode: "e500"}
	ok := breaker.Report{Outcome: breaker.OutcomeSuccess}
	steps := []struct {
		name       string
		advance    time.Duration
		rep        breaker.Report
		have, gone []string
	}{
		{"a failure creates the state", 0, fail, []string{"cf", "le", "ls", "fc", "wcf", "wcc"}, nil},
		{"a success without status or code (fast path)", time.Second, ok, []string{"wcf", "fc"}, []string{"cf", "le", "ls"}},
		{"the next window: the failure is the previous window's", p.Window, ok, []string{"wpc", "wpf"}, []string{"wcf"}},
		{"windows later: nothing carried", 3 * p.Window, ok, []string{"wcc"}, []string{"wpc", "wpf", "wcf"}},
		{"a failure again (full script)", time.Second, fail, []string{"cf", "le", "wcf"}, nil},
		{"windows later, by a failure: the full script deletes too", 3 * p.Window, fail, []string{"wcf"}, []string{"wpc", "wpf"}},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		report(s.rep)
		names, defaults := storedFields(ctx, t, rdb, c)
		assert.Empty(t, defaults, "%s: fields stored at their default", s.name)
		for _, f := range s.have {
			assert.Contains(t, names, f, s.name)
		}
		for _, f := range s.gone {
			assert.NotContains(t, names, f, s.name)
		}
	}
}

// TestStateWithEveryFieldStoredReadsTheSame: a state hash written by the
// previous scripts (every field stored, 0 and ” included) reads as the
// same state as the compact one, and moves the same way: a success and a
// failure on each leave the same states, and the fast path drops the
// fields it moves to their default.
func TestStateWithEveryFieldStoredReadsTheSame(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := breaker.DefaultPolicy()
	st, err := store.New(rdb, store.Options{Policy: &p, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	compact, full := store.Conn{Tenant: "compat", ID: keys.ID{0xc1}}, store.Conn{Tenant: "compat", ID: keys.ID{0xc2}}
	_, err = st.Report(ctx, compact, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
	require.NoError(t, err)
	// full: the same fields, every other one at its default, as the
	// previous scripts stored them; registered as a create would.
	_, err = st.Report(ctx, full, breaker.Report{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200})
	require.NoError(t, err)
	m, err := rdb.HGetAll(ctx, keys.Layout{Tenant: compact.Tenant, ID: compact.ID}.State()).Result()
	require.NoError(t, err)
	var args []any
	for _, f := range schema.State() {
		v, ok := m[f.Hash]
		if !ok && !f.Text {
			v = "0"
		}
		args = append(args, f.Hash, v)
	}
	args = append(args, "xp", m["xp"])
	require.NoError(t, rdb.HSet(ctx, keys.Layout{Tenant: full.Tenant, ID: full.ID}.State(), args...).Err())
	same := func(step string) {
		t.Helper()
		a, _, err := st.Get(ctx, compact.Tenant, compact.ID, 0)
		require.NoError(t, err)
		b, _, err := st.Get(ctx, full.Tenant, full.ID, 0)
		require.NoError(t, err)
		assert.Equal(t, a.State, b.State, step)
		assert.Equal(t, a.Exists, b.Exists, step)
	}
	same("as written")
	for i, rep := range []breaker.Report{
		{Outcome: breaker.OutcomeTransientFailure, HTTPStatus: 500, ErrorCode: "e500"},
		{Outcome: breaker.OutcomeSuccess},
		{Outcome: breaker.OutcomeSuccess, HTTPStatus: 200},
	} {
		now = now.Add(time.Second)
		for _, c := range []store.Conn{compact, full} {
			_, err := st.Report(ctx, c, rep)
			require.NoError(t, err)
		}
		same(fmt.Sprintf("after report %d", i+1))
	}
	names, _ := storedFields(ctx, t, rdb, full)
	for _, f := range []string{"cf", "le"} {
		assert.NotContains(t, names, f, "the fast path deletes what it moves to its default")
	}
}
