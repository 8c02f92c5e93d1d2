package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/tools/knobdoc/tsknob"
)

func TestServerOnly(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(repoRoot, clientPolicyFile))
	require.NoError(t, err)
	got, err := ServerOnly(src)
	require.NoError(t, err)
	assert.Equal(t, []string{"trip-quorum"}, got, "client/policy.go's serverOnlyKnobs")

	for name, c := range map[string]struct{ src, err string }{
		"no map":     {"package client\n", "no serverOnlyKnobs"},
		"not a knob": {"package client\nvar serverOnlyKnobs = map[string]string{\"no-such\": \"x\"}\n", `"no-such", which is no knob`},
		"syntax":     {"package client\nvar = \n", "expected"},
	} {
		_, err := ServerOnly([]byte(c.src))
		assert.ErrorContains(t, err, c.err, name)
	}
	got, err = ServerOnly([]byte("package client\nvar serverOnlyKnobs = map[string]string{\"shadow\": \"x\", \"jitter\": \"y\"}\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"shadow", "jitter"}, got)
}

// TestTS: the module has a Policy field, a default and a table row for
// every knob (with its bounds in the TS unit and whether it is server-only),
// and an interface field for every field of breaker.State.
func TestTS(t *testing.T) {
	t.Parallel()
	docs, err := BreakerDocs(filepath.Join(repoRoot, breakerDir))
	require.NoError(t, err)
	assert.Contains(t, docs["Lease.Slot"], "0 to MaxProbes-1")
	assert.Contains(t, docs["State.OpenUntil"], "Unix ms", "a line comment counts")
	assert.Contains(t, docs["Fleet.CurFirsts"], "the budget's base", "a comment shared by a line of fields goes to each")
	out, err := TS([]string{"trip-quorum"}, docs)
	require.NoError(t, err)
	s := string(out)
	def := breaker.DefaultPolicy()
	for _, k := range breaker.Knobs() {
		f := tsknob.Field(k)
		assert.Contains(t, s, "\n  "+f+": ", k.Name)
		assert.Contains(t, s, "\n    "+f+": "+tsValue(tsknob.Value(k, def))+",\n", k.Name)
		row := `{ name: "` + k.Name + `", key: "` + k.Key() + `", field: "` + f + `"`
		require.Contains(t, s, row)
		line := s[strings.Index(s, row):]
		line = line[:strings.Index(line, "\n")]
		assert.Contains(t, line, "min: "+tsBound(k, k.Min)+", max: "+tsBound(k, k.Max)+",")
		assert.Contains(t, line, "serverOnly: "+map[bool]string{true: "true", false: "false"}[k.Name == "trip-quorum"])
	}
	assert.Contains(t, s, "export const MaxDurationMs = 604800000;")
	assert.Contains(t, s, `min: 1, max: 604800000`, "lease-ttl's 1ms and 168h in ms")
	st := reflect.TypeFor[breaker.State]()
	for i := range st.NumField() {
		assert.Contains(t, s, "\n  "+tsknob.Name(st.Field(i).Name)+": ", st.Field(i).Name)
		assert.Contains(t, s, "\n  \""+tsknob.Name(st.Field(i).Name)+"\",\n", st.Field(i).Name)
	}
	assert.Contains(t, s, "  /** "+docs["Fleet.PrevFirsts"]+" */\n  prevFirsts: number;")
	for _, shape := range []string{"Window", "Lease", "Fleet", "Reporter", "StateFields"} {
		assert.Contains(t, s, "export interface "+shape+" {")
	}
}
