package breaker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLeaseExtension: an extension asks for ttl ms; 0 or less is the
// policy's LeaseTTL, and LeaseTTLMax (when set) cuts it.
func TestLeaseExtension(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		ttl, max time.Duration
		ask      int64
		want     int64
	}{
		{"under the bound", 30 * time.Second, 10 * time.Minute, 60_000, 60_000},
		{"at the bound", 30 * time.Second, 10 * time.Minute, 600_000, 600_000},
		{"a day, cut", 30 * time.Second, 10 * time.Minute, 86_400_000, 600_000},
		{"zero is the lease TTL", 30 * time.Second, 10 * time.Minute, 0, 30_000},
		{"no bound", 30 * time.Second, 0, 86_400_000, 86_400_000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy()
			p.LeaseTTL, p.LeaseTTLMax = tt.ttl, tt.max
			assert.Equal(t, tt.want, p.LeaseExtension(tt.ask))
		})
	}
}

// TestLeaseTTLMaxValidates: within its own bounds, [0, 24h], whole ms.
func TestLeaseTTLMaxValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		max  time.Duration
		want string
	}{
		{"the default", 10 * time.Minute, ""},
		{"off", 0, ""},
		{"a day", 24 * time.Hour, ""},
		{"below lease_ttl: extensions are shorter than the grant", time.Second, ""},
		{"over a day", 24*time.Hour + time.Millisecond, "lease_ttl_max must be in [0s, 24h0m0s], got 24h0m0.001s"},
		{"negative", -time.Second, "lease_ttl_max must not be negative"},
		{"not whole ms", 30*time.Second + time.Microsecond, "lease_ttl_max must be whole milliseconds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy()
			p.LeaseTTLMax = tt.max
			err := p.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
