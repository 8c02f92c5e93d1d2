package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot, SchemaFile))
	require.NoError(t, err)
	n, err := parseJSON(raw)
	require.NoError(t, err)
	assert.Equal(t, string(raw), string(n.encode()), "the checked-in schema reads and writes back byte for byte")

	for _, doc := range []string{`{}`, `[]`, `{"a": [], "b": {}, "c": [1, "x<&>µ", true, null, 1.5e3]}`} {
		n, err := parseJSON([]byte(doc))
		require.NoError(t, err)
		var want, got any
		require.NoError(t, json.Unmarshal([]byte(doc), &want))
		require.NoError(t, json.Unmarshal(n.encode(), &got))
		assert.Equal(t, want, got, doc)
	}
	n, err = parseJSON([]byte(`{"a": "x<&>µ"}`))
	require.NoError(t, err)
	assert.Contains(t, string(n.encode()), `"x<&>µ"`, "no HTML escaping")
	_, err = parseJSON([]byte(`{} {}`))
	assert.Error(t, err)
	_, err = parseJSON([]byte(`{"a": `))
	assert.Error(t, err)
}

// schemaSkeleton is the part of the chart's schema the generator writes
// into, with stale knob properties and members it must keep.
const schemaSkeleton = `{
  "definitions": {
    "policyKnobs": {"type": "object", "properties": {"rate_limit_default": {"type": "string"}}},
    "policyTenant": {"type": "object", "properties": {"jitter": {}, "labels": {"type": "array"}}},
    "policyLabelRule": {"type": "object", "properties": {"match": {"type": "string"}, "jitter": {}}, "required": ["match"]}
  },
  "properties": {
    "policy": {"type": "object", "properties": {"openMax": {}, "overrides": {"type": "object"}, "rateLimitDefault": {}}, "required": ["openMax", "rateLimitDefault"]},
    "other": {"type": "string", "description": "kept"}
  }
}`

func TestSchema(t *testing.T) {
	t.Parallel()
	out, err := Schema([]byte(schemaSkeleton))
	require.NoError(t, err)
	var s struct {
		Definitions map[string]struct {
			Comment    string                     `json:"$comment"`
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"definitions"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(out, &s))
	var policy struct {
		Comment    string                     `json:"$comment"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	require.NoError(t, json.Unmarshal(s.Properties["policy"], &policy))
	assert.JSONEq(t, `{"type": "string", "description": "kept"}`, string(s.Properties["other"]))
	assert.Equal(t, schemaComment, policy.Comment)

	var keys, values []string
	for _, k := range breaker.Knobs() {
		keys = append(keys, k.Key())
		values = append(values, ValueName(k))
	}
	assert.ElementsMatch(t, append(values, "overrides"), mapKeys(policy.Properties), "the knobs and overrides, no stale knob")
	assert.Equal(t, values, policy.Required)
	assert.ElementsMatch(t, keys, mapKeys(s.Definitions["policyKnobs"].Properties))
	assert.ElementsMatch(t, append(keys, "labels"), mapKeys(s.Definitions["policyTenant"].Properties))
	var ruleKeys []string
	for _, k := range breaker.Knobs() {
		if !k.TenantOnly {
			ruleKeys = append(ruleKeys, k.Key())
		}
	}
	assert.ElementsMatch(t, append(ruleKeys, "match"), mapKeys(s.Definitions["policyLabelRule"].Properties), "a tenant-only knob is no property of a label rule")
	for _, d := range s.Definitions {
		assert.Equal(t, schemaComment, d.Comment)
	}
	assert.Contains(t, string(out), `"required": [
        "match"
      ]`, "members besides properties are kept")

	// The order: kept members where they were, the knobs in the table's
	// order where the first replaced property was.
	rule := string(out)[strings.Index(string(out), `"policyLabelRule"`):]
	assert.Less(t, strings.Index(rule, `"match"`), strings.Index(rule, `"consecutive_failures"`))
	assert.Less(t, strings.Index(rule, `"consecutive_failures"`), strings.Index(rule, `"lease_ttl"`))
	pol := string(out)[strings.Index(string(out), `"policy": {`):]
	assert.Less(t, strings.Index(pol, `"leaseTTL"`), strings.Index(pol, `"overrides"`))

	again, err := Schema(out)
	require.NoError(t, err)
	assert.Equal(t, string(out), string(again), "generating twice changes nothing")

	_, err = Schema([]byte(`{"definitions": {}}`))
	assert.ErrorContains(t, err, "no object at definitions.policyKnobs")
}

func mapKeys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestSchemaKnob: each knob's schema has the table's bounds and names its
// flag; a ratio under policy also takes the decimal string --set passes; a
// switch is a boolean.
func TestSchemaKnob(t *testing.T) {
	t.Parallel()
	type bounds struct {
		Type             string   `json:"type"`
		Description      string   `json:"description"`
		Minimum          *float64 `json:"minimum"`
		Maximum          *float64 `json:"maximum"`
		ExclusiveMaximum *float64 `json:"exclusiveMaximum"`
		AllOf            []struct {
			Ref string `json:"$ref"`
		} `json:"allOf"`
		OneOf []bounds `json:"oneOf"`
	}
	decode := func(n *node) bounds {
		var b bounds
		require.NoError(t, json.Unmarshal(n.encode(), &b))
		return b
	}
	for _, k := range breaker.Knobs() {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			file, value := decode(fileKnob(k)), decode(valueKnob(k))
			assert.True(t, strings.HasPrefix(file.Description, k.Flag()+": "+k.Doc), file.Description)
			assert.True(t, strings.HasPrefix(value.Description, k.Flag()+": "+k.Doc), value.Description)
			if k.Kind == breaker.Switch {
				for _, b := range []bounds{file, value} {
					assert.Equal(t, "boolean", b.Type, "a switch is true or false, nothing else")
					assert.Nil(t, b.Minimum)
					assert.Nil(t, b.Maximum)
					assert.Empty(t, b.AllOf)
					assert.Empty(t, b.OneOf)
				}
				return
			}
			if k.Kind == breaker.Span {
				for _, b := range []bounds{file, value} {
					require.Len(t, b.AllOf, 1)
					assert.Equal(t, "#/definitions/duration", b.AllOf[0].Ref)
				}
				return
			}
			if k.Kind == breaker.Ratio {
				require.Len(t, value.OneOf, 2)
				assert.Equal(t, "string", value.OneOf[1].Type)
				value = value.OneOf[0]
			}
			want := map[breaker.Kind]string{breaker.Count: "integer", breaker.Ratio: "number"}[k.Kind]
			for _, b := range []bounds{file, value} {
				assert.Equal(t, want, b.Type)
				require.NotNil(t, b.Minimum)
				assert.Equal(t, k.Min, *b.Minimum)
				if k.MaxExclusive {
					assert.Nil(t, b.Maximum)
					require.NotNil(t, b.ExclusiveMaximum)
					assert.Equal(t, k.Max, *b.ExclusiveMaximum)
				} else {
					assert.Nil(t, b.ExclusiveMaximum)
					require.NotNil(t, b.Maximum)
					assert.Equal(t, k.Max, *b.Maximum)
				}
			}
		})
	}
}

func TestValueName(t *testing.T) {
	t.Parallel()
	want := map[string]string{"consecutive-failures": "consecutiveFailures", "lease-ttl": "leaseTTL", "jitter": "jitter",
		"rate-limit-cooldown": "rateLimitCooldown", "throttle-k": "throttleK", "retry-budget-min": "retryBudgetMin", "shadow": "shadow"}
	for _, k := range breaker.Knobs() {
		if w, ok := want[k.Name]; ok {
			assert.Equal(t, w, ValueName(k))
		}
		assert.Regexp(t, `^[a-z]+([A-Z][a-z]*|TTL)*$`, ValueName(k))
	}
}

func TestReadme(t *testing.T) {
	t.Parallel()
	doc := "# x\n\nbefore\n\n" + readmeBegin + "| stale |\n" + readmeEnd + "\nafter\n"
	out, err := Readme([]byte(doc))
	require.NoError(t, err)
	assert.Equal(t, "# x\n\nbefore\n\n"+readmeBegin+Table()+readmeEnd+"\nafter\n", string(out))
	again, err := Readme(out)
	require.NoError(t, err)
	assert.Equal(t, string(out), string(again))

	table := Table()
	lines := strings.Split(strings.TrimSuffix(table[strings.Index(table, "\n| "):], "\n"), "\n")[1:]
	require.Len(t, lines, 2+len(breaker.Knobs()), "after the lead, a header, a rule and a row per knob")
	assert.True(t, strings.HasPrefix(lines[1], "| --- |"))
	def := breaker.DefaultPolicy()
	for i, k := range breaker.Knobs() {
		row := lines[2+i]
		for _, cell := range []string{"`" + k.Flag() + "`", "`" + k.Key() + "`", "`policy." + ValueName(k) + "`", "`" + short(k.String(k.Get(def))) + "`", "`" + short(k.Bounds()) + "`", k.Doc} {
			assert.Contains(t, row, cell, k.Name)
		}
		assert.Equal(t, strings.Count(lines[0], "|"), strings.Count(row, "|")-strings.Count(row, `\|`), "one cell per column")
	}

	for name, doc := range map[string]string{
		"no markers":  "# x\n",
		"end only":    readmeEnd,
		"reversed":    readmeEnd + readmeBegin,
		"begin twice": readmeBegin + readmeBegin + readmeEnd,
	} {
		_, err := Readme([]byte(doc))
		assert.Error(t, err, name)
	}
}

func TestShort(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"1m0s": "1m", "1h0m0s": "1h", "168h0m0s": "168h", "1h30m0s": "1h30m", "1h0m30s": "1h0m30s",
		"0s": "0s", "10s": "10s", "1.5s": "1.5s", "1m30s": "1m30s", "[0s, 168h0m0s]": "[0s, 168h]", "[0, 100000]": "[0, 100000]",
	} {
		assert.Equal(t, want, short(in), in)
		if d, err := time.ParseDuration(in); err == nil {
			back, err := time.ParseDuration(short(in))
			require.NoError(t, err)
			assert.Equal(t, d, back, "%s means what %s means", short(in), in)
		}
	}
}

func TestRunWritesAndChecks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(SchemaFile)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, SchemaFile), []byte(schemaSkeleton), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, ReadmeFile), []byte(readmeBegin+readmeEnd), 0o644))
	clientPolicy, err := os.ReadFile(filepath.Join(repoRoot, clientPolicyFile))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(clientPolicyFile)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, clientPolicyFile), clientPolicy, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(TSFile)), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(HelpersFile)), 0o755))
	breakerSrc, err := filepath.Abs(filepath.Join(repoRoot, breakerDir))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(breakerDir)), 0o755))
	require.NoError(t, os.Symlink(breakerSrc, filepath.Join(root, breakerDir)))
	require.NoError(t, os.WriteFile(filepath.Join(root, HelpersFile), []byte(helpersBegin+helpersEnd), 0o644))

	assert.ErrorContains(t, run(root, true), "stale: "+SchemaFile+", "+ReadmeFile+", "+HelpersFile+", "+TSFile, "a missing TS module is stale")
	got, err := os.ReadFile(filepath.Join(root, SchemaFile))
	require.NoError(t, err)
	assert.Equal(t, schemaSkeleton, string(got), "-check writes nothing")

	require.NoError(t, run(root, false))
	require.NoError(t, run(root, true), "written: current")
}
