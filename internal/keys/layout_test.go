package keys

import (
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
