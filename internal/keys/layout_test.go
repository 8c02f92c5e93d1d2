package keys

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLayoutScriptKeysShareOneHashTag(t *testing.T) {
	t.Parallel()
	l := Layout{Tenant: "team-a", ID: ID{0xab}}
	ks := l.Script()
	assert.Equal(t, []string{l.State(), l.History()}, ks)
	ks = append(ks, l.Report("k1"))
	tag := "{team-a:" + l.ID.String() + "}"
	for _, k := range ks {
		assert.Contains(t, k, tag, "one Redis Cluster slot per connection")
	}
}

func TestLayoutKeys(t *testing.T) {
	t.Parallel()
	l := Layout{Tenant: "team-a", ID: ID{0xab, 0x01}}
	p := "cd:{team-a:ab01" + strings.Repeat("00", 30) + "}:"
	assert.Equal(t, p+"s", l.State())
	assert.Equal(t, p+"h", l.History())
	assert.Equal(t, p+"r:k1", l.Report("k1"))
	assert.Equal(t, []string{p + "s", p + "h"}, l.Script())
	assert.Equal(t, "ab01"+strings.Repeat("00", 30), l.ID.String())
}

// TestLayoutScriptAllocs holds what every Admit and Report spends on its
// keys: one string for both and their slice; one string per id in hex.
func TestLayoutScriptAllocs(t *testing.T) {
	l := Layout{Tenant: "team-a", ID: ID{0xab}}
	assert.Equal(t, 2.0, testing.AllocsPerRun(100, func() { _ = l.Script() }))
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = l.ID.String() }))
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = l.State() }))
}

func TestTenantKeysShareOneHashTag(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "cd:{team-a}:idx", Index("team-a"))
	assert.Equal(t, "cd:{team-a}:wake", Wake("team-a"), "the index and the wake set: one slot, one script")
}

func TestValidateTenant(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"default", "team-a", "a_1"} {
		assert.NoError(t, ValidateTenant(ok), ok)
	}
	for _, bad := range []string{"", "Team", "a}b", "a{b", "a:b", string(make([]byte, 65))} {
		assert.ErrorIs(t, ValidateTenant(bad), ErrInvalidTenant, "%q", bad)
	}
}

func TestBatchClaimKey(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "cd:b:{team-a:AbC_-0123456789abcd}", BatchClaim("team-a", "AbC_-0123456789abcd"))
	assert.NotEqual(t, BatchClaim("team-a", "k"), BatchClaim("team-b", "k"), "tenants are apart")
}
