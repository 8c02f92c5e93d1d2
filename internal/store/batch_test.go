package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/store"
)

// TestClaimBatch: the first claim of a batch key is remembered and the
// next ones get it back (a resend), apart per tenant, until the report key
// TTL passes; bad arguments are refused. Fails if a resend could claim
// again (its held successes would count twice). On real Redis and
// miniredis.
func TestClaimBatch(t *testing.T) {
	t.Parallel()
	for name, open := range keyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, rdb, clock := open(t, store.Options{ReportKeyTTL: time.Minute})
			ctx := t.Context()
			key := "k" + name + "-0123456789abcdef"
			first, found, err := st.ClaimBatch(ctx, "team-a", key, "d1:01")
			require.NoError(t, err)
			assert.False(t, found)
			assert.Empty(t, first)

			first, found, err = st.ClaimBatch(ctx, "team-a", key, "d2:ff")
			require.NoError(t, err)
			assert.True(t, found, "a resend finds the first claim")
			assert.Equal(t, "d1:01", first, "and keeps it")

			_, found, err = st.ClaimBatch(ctx, "team-b", key, "d3:00")
			require.NoError(t, err)
			assert.False(t, found, "another tenant's key is another batch")

			ttl, err := rdb.PTTL(ctx, "cd:b:{team-a:"+key+"}").Result()
			require.NoError(t, err)
			assert.InDelta(t, time.Minute.Seconds(), ttl.Seconds(), 2, "kept for the report key TTL")
			if clock != nil { // real Redis expires by its own clock: the PTTL above holds it
				clock.advance(time.Minute + time.Second)
				_, found, err = st.ClaimBatch(ctx, "team-a", key, "d4:00")
				require.NoError(t, err)
				assert.False(t, found, "forgotten after the TTL")
			}

			for _, bad := range []struct{ tenant, key, claim string }{
				{"Team", key, "d"}, {"team-a", "", "d"}, {"team-a", key, ""}, {"team-a", key, string(make([]byte, store.MaxBatchClaim+1))},
			} {
				_, _, err := st.ClaimBatch(ctx, bad.tenant, bad.key, bad.claim)
				assert.Error(t, err, "%+v", bad)
			}
		})
	}
}
