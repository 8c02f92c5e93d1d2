package tsknob

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

func TestName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ID": "id", "HTTPStatus": "httpStatus", "OpenUntil": "openUntil", "At": "at", "X": "x", "LastErrorCode": "lastErrorCode",
	} {
		assert.Equal(t, want, Name(in), in)
	}
}

// TestField: each knob's TS field is unique, a span's ends in Ms, and the
// fields the TS client has shipped keep their names.
func TestField(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, k := range breaker.Knobs() {
		f := Field(k)
		assert.False(t, seen[f], "two knobs are %s", f)
		seen[f] = true
		assert.Regexp(t, `^[a-z][A-Za-z]*$`, f)
		if k.Kind == breaker.Span {
			assert.Regexp(t, `Ms$`, f, k.Name)
		}
	}
	for _, f := range []string{"consecutiveFailures", "windowMs", "rateLimitDefaultMs", "leaseTtlMs", "throttleK", "shadow"} {
		assert.True(t, seen[f], "shipped field %s", f)
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	p := breaker.DefaultPolicy()
	p.OpenBase = 1500 * time.Microsecond
	p.Shadow = true
	got := Policy(p)
	assert.Len(t, got, len(breaker.Knobs()))
	assert.Equal(t, 1.5, got["openBaseMs"])
	assert.Equal(t, int64(5), got["consecutiveFailures"])
	assert.Equal(t, 0.5, got["failureRate"])
	assert.Equal(t, true, got["shadow"])
}

// TestStateShapes: every field of the state has a TS type, and JSON writes
// each under its Name.
func TestStateShapes(t *testing.T) {
	t.Parallel()
	st := reflect.TypeFor[breaker.State]()
	got, ok := JSON(breaker.State{Leases: []breaker.Lease{{Slot: 1, Token: "t"}}}).(map[string]any)
	require.True(t, ok)
	for i := range st.NumField() {
		f := st.Field(i)
		_, err := Type(f.Type)
		require.NoError(t, err, f.Name)
		assert.Contains(t, got, Name(f.Name))
	}
	assert.Equal(t, []any{map[string]any{"slot": int64(1), "token": "t", "granted": int64(0), "expires": int64(0)}}, got["leases"])
	_, err := Type(reflect.TypeFor[map[string]int]())
	assert.Error(t, err)
	assert.Panics(t, func() { JSON(struct{ M map[string]int }{}) })
}
