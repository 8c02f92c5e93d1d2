package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// TestClearWithoutOverrideChangesNothing: clearing when there is no
// override records no transition, keeps the revision and the state, and
// does not create a connection cooldownd does not know (it recorded an
// override_cleared transition and bumped the revision).
func TestClearWithoutOverrideChangesNothing(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	st, err := store.New(rdb, store.Options{IdleTTL: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	tests := []struct {
		name   string
		setup  func(t *testing.T, c store.Conn)
		exists bool
		phase  breaker.Phase
	}{
		{"closed after a success", func(t *testing.T, c store.Conn) {
			_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess})
			require.NoError(t, err)
		}, true, breaker.Closed},
		{"open after a 429", func(t *testing.T, c store.Conn) {
			_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeRateLimited, RetryAfter: 60_000})
			require.NoError(t, err)
		}, true, breaker.Open},
		{"an override already cleared", func(t *testing.T, c store.Conn) {
			_, err := st.Force(ctx, c.Tenant, c.ID, breaker.ForcedOpen, 0, "ops", "maintenance")
			require.NoError(t, err)
			snap, err := st.Force(ctx, c.Tenant, c.ID, breaker.NoOverride, 0, "ops", "done")
			require.NoError(t, err)
			require.Len(t, snap.Events, 1, "clearing an override is a transition")
		}, true, breaker.Closed},
		{"a connection cooldownd does not know", func(*testing.T, store.Conn) {}, false, breaker.Closed},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := store.Conn{Tenant: "t", ID: testID(0xc1, byte(i))}
			tt.setup(t, c)
			before, histBefore, err := st.Get(ctx, c.Tenant, c.ID, 50)
			require.NoError(t, err)

			snap, err := st.Force(ctx, c.Tenant, c.ID, breaker.NoOverride, 0, "ops", "nothing to clear")
			require.NoError(t, err)
			assert.Empty(t, snap.Events, "no transition")
			assert.Equal(t, tt.exists, snap.Exists)
			assert.Equal(t, before.State.Revision, snap.State.Revision, "the revision stays")
			assert.Equal(t, tt.phase, snap.State.Phase)

			after, histAfter, err := st.Get(ctx, c.Tenant, c.ID, 50)
			require.NoError(t, err)
			assert.Equal(t, tt.exists, after.Exists, "an unknown connection is not created")
			assert.Equal(t, before.State, after.State)
			assert.Equal(t, histBefore, histAfter, "nothing is recorded")
		})
	}
}

// TestClearAfterAnOverrideEnded: an override that ended by itself is
// settled (its force_expired transition is recorded once), and the clear
// that follows adds nothing.
func TestClearAfterAnOverrideEnded(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	clock := newMiniClock(m)
	st, err := store.New(rdb, store.Options{IdleTTL: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	c := store.Conn{Tenant: "t", ID: testID(0xc2)}
	forced, err := st.Force(ctx, c.Tenant, c.ID, breaker.ForcedClosed, time.Second, "ops", "ignore failures")
	require.NoError(t, err)
	clock.advance(2 * time.Second)

	snap, err := st.Force(ctx, c.Tenant, c.ID, breaker.NoOverride, 0, "ops", "done")
	require.NoError(t, err)
	require.Len(t, snap.Events, 1)
	assert.Equal(t, breaker.CauseForceExpired, snap.Events[0].Cause, "only the override's own end")
	assert.Equal(t, forced.State.Revision+1, snap.State.Revision)
	assert.Equal(t, breaker.NoOverride, snap.State.Override)

	_, hist, err := st.Get(ctx, c.Tenant, c.ID, 50)
	require.NoError(t, err)
	require.Len(t, hist, 2, "forced, then expired")
	assert.Equal(t, breaker.CauseForceExpired, hist[0].Cause)
}
