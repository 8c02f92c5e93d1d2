package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/store"
)

// TestPeers: a routing replica's registration lasts its ttl by the
// store's clock (one for every replica), renewals extend it, a replica
// that stops renewing drops out once it lapses, and a ttl of 0 leaves at
// once; every replica reads the same sorted view. Fails if a lapsed
// replica stays an owner or a live one is missing. On real Redis and
// miniredis.
func TestPeers(t *testing.T) {
	t.Parallel()
	for name, open := range keyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
			st, _, _ := open(t, store.Options{Clock: clock})
			ctx := t.Context()
			const ttl = 3 * time.Second
			for _, p := range []string{"10.0.0.2:8080", "10.0.0.1:8080", "10.0.0.3:8080"} {
				_, err := st.Peers(ctx, p, ttl)
				require.NoError(t, err)
			}
			live, err := st.Peers(ctx, "10.0.0.1:8080", ttl)
			require.NoError(t, err)
			assert.Equal(t, []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"}, live)

			advance(2 * time.Second) // 10.0.0.3 renews, 10.0.0.2 does not
			_, err = st.Peers(ctx, "10.0.0.3:8080", ttl)
			require.NoError(t, err)
			advance(1500 * time.Millisecond)
			live, err = st.Peers(ctx, "10.0.0.1:8080", ttl)
			require.NoError(t, err)
			assert.Equal(t, []string{"10.0.0.1:8080", "10.0.0.3:8080"}, live, "10.0.0.2 lapsed")

			live, err = st.Peers(ctx, "10.0.0.3:8080", 0)
			require.NoError(t, err)
			assert.Equal(t, []string{"10.0.0.1:8080"}, live, "10.0.0.3 left")

			_, err = st.Peers(ctx, "", ttl)
			assert.Error(t, err)
			_, err = st.Peers(ctx, string(make([]byte, store.MaxPeerAddress+1)), ttl)
			assert.Error(t, err)
		})
	}
}
