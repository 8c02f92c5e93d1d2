package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// TestListReadsPastExpiredPages: List forgets index entries whose state
// expired and reads on past a page of nothing but those, so it never
// answers an empty page with more (a caller would have no id to continue
// after); a page may come back short. Past 100 such pages in a row it
// fails unavailable, and a retry goes on where it stopped.
func TestListReadsPastExpiredPages(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// expired connections come first in id order, then the alive ones.
		expired, alive, limit int
		want                  int // alive connections in the first page
		more                  bool
		unavailable           bool // the first List fails; the retry answers
	}{
		{"nothing expired", 0, 3, 2, 2, true, false},
		{"a whole page expired", 2, 1, 2, 1, false, false},
		{"three pages expired, then a full page", 6, 2, 2, 2, false, false},
		{"a page and a half expired: a short page with more", 3, 3, 2, 1, true, false},
		{"everything expired", 5, 0, 2, 0, false, false},
		{"100 pages expired", 100, 1, 1, 1, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, rdb := redistest.Mini(t)
			clock := newMiniClock(m)
			st, err := store.New(rdb, store.Options{IdleTTL: time.Hour})
			require.NoError(t, err)
			ctx := context.Background()
			report := func(i int) {
				_, err := st.Report(ctx, store.Conn{Tenant: "t", ID: testID(byte(i))}, breaker.Report{Outcome: breaker.OutcomeSuccess})
				require.NoError(t, err)
			}
			for i := range tc.expired + tc.alive {
				report(i)
			}
			clock.advance(30 * time.Minute)
			for i := tc.expired; i < tc.expired+tc.alive; i++ {
				report(i) // refreshed: alive after the expired ones are gone
			}
			clock.advance(45 * time.Minute)

			snaps, more, err := st.List(ctx, "t", "", tc.limit)
			if tc.unavailable {
				require.ErrorIs(t, err, store.ErrUnavailable)
				snaps, more, err = st.List(ctx, "t", "", tc.limit)
			}
			require.NoError(t, err)
			assert.Equal(t, tc.more, more)
			var got, want []keys.ID
			for _, s := range snaps {
				got = append(got, s.ID)
			}
			for i := tc.expired; i < tc.expired+tc.want; i++ {
				want = append(want, testID(byte(i)))
			}
			assert.Equal(t, want, got)
			if more {
				assert.NotEmpty(t, snaps, "more always comes with an id to continue after")
			}
			if !more {
				n, err := st.Count(ctx, "t")
				require.NoError(t, err)
				assert.Equal(t, int64(tc.alive), n, "every expired entry read past left the index")
			}
		})
	}
}

// TestListLimit: a limit below 1 is the caller's error, not an empty page.
func TestListLimit(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.Mini(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = st.Report(ctx, store.Conn{Tenant: "t", ID: testID(1)}, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	for _, limit := range []int{0, -1} {
		_, _, err := st.List(ctx, "t", "", limit)
		require.Error(t, err, "limit %d", limit)
		assert.NotErrorIs(t, err, store.ErrUnavailable)
	}
}
