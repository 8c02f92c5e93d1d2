// Command knobdoc writes the policy knobs of internal/breaker (the table
// breaker.Knobs) into the files that describe them to operators:
//
//   - deploy/helm/cooldownd/values.schema.json: the knob properties of
//     policy (the flags' values), of policy.overrides' sections
//     (definitions policyKnobs, policyTenant, policyLabelRule) and
//     policy's required list; every other member is left as it is;
//   - README.md: the policy table between its marker comments;
//   - deploy/helm/cooldownd/templates/_helpers.tpl: between its markers,
//     the knob table its validation ranges over and the breaker's limits
//     (helpers.go);
//   - clients/ts/src/knobs.gen.ts: the knob table, Policy and
//     defaultPolicy for the TypeScript port, and the shapes of the
//     breaker's State (ts.go).
//
// Run it from the repository's root (make generate); with -check it writes
// nothing and fails when a file is stale (the test does the same).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// The generated files, relative to the repository's root.
const (
	SchemaFile = "deploy/helm/cooldownd/values.schema.json"
	ReadmeFile = "README.md"
)

// The README's markers: the table is what lies between them.
const (
	readmeBegin = "<!-- policy-knobs:begin: generated from internal/breaker/knobs.go by go run ./tools/knobdoc (make generate); do not edit -->\n"
	readmeEnd   = "<!-- policy-knobs:end -->\n"
)

// valuesOverrides is the chart's policy file, beside the knobs under policy.
const valuesOverrides = "overrides"

// schemaComment marks each object whose knob properties are generated.
const schemaComment = "The policy knobs' properties here are generated from internal/breaker/knobs.go by go run ./tools/knobdoc (make generate); edit the table there, not them."

func main() {
	root := flag.String("root", ".", "the repository's root")
	check := flag.Bool("check", false, "write nothing; fail when a generated part is stale")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "knobdoc:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	var stale []string
	clientPolicy, err := os.ReadFile(filepath.Join(root, clientPolicyFile))
	if err != nil {
		return err
	}
	serverOnly, err := ServerOnly(clientPolicy)
	if err != nil {
		return err
	}
	docs, err := BreakerDocs(filepath.Join(root, breakerDir))
	if err != nil {
		return err
	}
	ts := func([]byte) ([]byte, error) { return TS(serverOnly, docs) }
	for _, f := range []struct {
		path string
		gen  func([]byte) ([]byte, error)
	}{{SchemaFile, Schema}, {ReadmeFile, Readme}, {HelpersFile, Helpers}, {TSFile, ts}} {
		path := filepath.Join(root, f.path)
		old, err := os.ReadFile(path)
		if err != nil && !(f.path == TSFile && errors.Is(err, os.ErrNotExist)) {
			return err
		}
		out, err := f.gen(old)
		if err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		if bytes.Equal(out, old) {
			continue
		}
		if check {
			stale = append(stale, f.path)
			continue
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return err
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("stale: %s (run make generate)", strings.Join(stale, ", "))
	}
	return nil
}

// ValueName is the knob's key under the chart's policy: camelCase of its
// name, with TTL in capitals (lease-ttl: leaseTTL).
func ValueName(k *breaker.Knob) string {
	parts := strings.Split(k.Name, "-")
	for i, p := range parts[1:] {
		if p == "ttl" {
			parts[i+1] = "TTL"
			continue
		}
		parts[i+1] = strings.ToUpper(p[:1]) + p[1:]
	}
	return strings.Join(parts, "")
}

// number is a bound as JSON writes it: an integer where it is one.
func number(v float64) any {
	if v == float64(int64(v)) {
		return int64(v)
	}
	return v
}

// bounded is a count's or a ratio's schema with the knob's own bounds and,
// for a knob Validate holds to 0 or a floor (offOrAtLeast), that rule.
func bounded(k *breaker.Knob, typ, description string) *node {
	n := object("type", typ)
	if description != "" {
		n.set("description", toNode(description), false)
	}
	n.set("minimum", toNode(number(k.Min)), false)
	if k.MaxExclusive {
		n.set("exclusiveMaximum", toNode(number(k.Max)), false)
	} else {
		n.set("maximum", toNode(number(k.Max)), false)
	}
	if _, f, ok := floor(k); ok {
		n.set("anyOf", array(object("const", 0), object("minimum", number(f))), false)
	}
	return n
}

// duration is a span's schema: the chart's duration definition and, for a
// span that must be positive, a non-zero digit (a 0 from --set arrives as
// a number, the only one the definition takes: minimum refuses it). Its bounds and whole
// milliseconds are the template's: a Go duration is a sum of parts (1h30m,
// 90m and 5400s are one span), which no pattern can add up.
func duration(k *breaker.Knob, description string) *node {
	n := object("allOf", array(object("$ref", "#/definitions/duration")), "description", description)
	if positive(k) {
		n.set("minimum", toNode(1), false)
		n.set("pattern", toNode("[1-9]"), false)
	}
	return n
}

// boolean is a switch's schema: true or false, as YAML writes them (the
// policy file refuses any other spelling; --set passes true and false as
// booleans too).
func boolean(description string) *node {
	return object("type", "boolean", "description", description)
}

// fileKnob is a knob's schema in a policy-file section.
func fileKnob(k *breaker.Knob) *node {
	description := k.Flag() + ": " + k.Doc + "."
	switch k.Kind {
	case breaker.Count:
		return bounded(k, "integer", description)
	case breaker.Ratio:
		return bounded(k, "number", description)
	case breaker.Switch:
		return boolean(description)
	default:
		return duration(k, description)
	}
}

// decimalString is a ratio's schema as a decimal string from --set: the
// knob's bounds and floor as patterns (a ratio's bounds are whole numbers
// from 0).
func decimalString(k *breaker.Knob) *node {
	if k.Min != 0 || k.Max != float64(int64(k.Max)) || k.Max < 1 {
		panic(fmt.Sprintf("knobdoc: ratio %s is in [%v, %v]: decimalString writes [0, a whole number] only", k.Name, k.Min, k.Max))
	}
	patterns := []any{object("pattern", decimalAtMost(int64(k.Max), k.MaxExclusive))}
	if f, _, ok := floor(k); ok {
		patterns = append(patterns, object("pattern", decimalOffOrAtLeast(f)))
	}
	return object("type", "string",
		"description", "A decimal as --set passes it (e.g. \"0.25\"), "+k.Bounds()+floorDoc(k)+".",
		"pattern", decimalPattern,
		"allOf", array(patterns...))
}

// floorDoc says a knob's floor, if any.
func floorDoc(k *breaker.Knob) string {
	if f, _, ok := floor(k); ok {
		return ", 0 or at least " + f
	}
	return ""
}

// valueKnob is a knob's schema under the chart's policy. A ratio also
// takes a decimal string (what --set passes), bounded by patterns. A
// switch is a boolean.
func valueKnob(k *breaker.Knob) *node {
	description := k.Flag() + ": " + k.Doc + "."
	switch k.Kind {
	case breaker.Count:
		return bounded(k, "integer", description)
	case breaker.Ratio:
		return object("description", k.Flag()+": "+k.Doc+"; a decimal string from --set is accepted.",
			"oneOf", array(bounded(k, "number", ""), decimalString(k)))
	case breaker.Switch:
		return boolean(description)
	default:
		return duration(k, description)
	}
}

// setKnobs replaces the properties of the object at path with keep's
// (those that are no knob, in their places) and gen's, where the first
// other property was (at the end when there was none), and marks the
// object as generated. A property neither kept nor generated (a knob the
// table renamed or dropped) is dropped.
func setKnobs(root *node, path []string, keep []string, gen []member) error {
	obj, err := root.path(path...)
	if err != nil {
		return err
	}
	props := obj.get("properties")
	if props == nil || props.delim != '{' {
		return fmt.Errorf("%s has no properties", strings.Join(path, "."))
	}
	var out []member
	placed := false
	for _, m := range props.members {
		if slices.Contains(keep, m.key) {
			out = append(out, m)
			continue
		}
		if !placed {
			out = append(out, gen...)
			placed = true
		}
	}
	if !placed {
		out = append(out, gen...)
	}
	props.members = out
	obj.set("$comment", toNode(schemaComment), true)
	return nil
}

// Schema rewrites the knob parts of the chart's values.schema.json.
func Schema(old []byte) ([]byte, error) {
	root, err := parseJSON(old)
	if err != nil {
		return nil, err
	}
	knobs := breaker.Knobs()
	valueNames := map[string]bool{}
	var file, label, values []member
	var required []any
	for _, k := range knobs {
		valueNames[ValueName(k)] = true
		file = append(file, member{k.Key(), fileKnob(k)})
		if !k.TenantOnly { // a label rule refuses it (additionalProperties: false)
			label = append(label, member{k.Key(), fileKnob(k)})
		}
		values = append(values, member{ValueName(k), valueKnob(k)})
		required = append(required, ValueName(k))
	}
	for _, section := range []struct {
		path []string
		keep []string
		gen  []member
	}{
		{[]string{"definitions", "policyKnobs"}, nil, file},
		{[]string{"definitions", "policyTenant"}, []string{"labels"}, file},
		{[]string{"definitions", "policyLabelRule"}, []string{"match"}, label},
		{[]string{"properties", "policy"}, []string{valuesOverrides}, values},
	} {
		if err := setKnobs(root, section.path, section.keep, section.gen); err != nil {
			return nil, err
		}
	}
	policy, _ := root.path("properties", "policy") // setKnobs found it
	if req := policy.get("required"); req != nil {
		for _, it := range req.items { // keep what is required besides the knobs
			if it.literal == scalar(valuesOverrides).literal {
				required = append(required, it)
			}
		}
	}
	policy.set("required", array(required...), false)
	return root.encode(), nil
}

// Table is the README's policy table (Markdown), with its lead.
func Table() string {
	var b strings.Builder
	b.WriteString("The policy knobs: each is a flag with its `COOLDOWND_*` variable, a key of the policy file\n" +
		"(`--policy-file`, per tenant and label pattern: [docs/policies.md](docs/policies.md)) and a value of\n" +
		"the chart. Durations are Go durations in whole milliseconds; the range is each knob's own, the\n" +
		"meaning says the rules between knobs.\n\n")
	b.WriteString("| flag (env `COOLDOWND_<FLAG>`) | policy file key | chart value | default | range | meaning |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	def := breaker.DefaultPolicy()
	for _, k := range breaker.Knobs() {
		meaning := k.Doc
		if k.TenantOnly {
			meaning += "; per tenant, not per label rule"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | `policy.%s` | `%s` | `%s` | %s |\n",
			k.Flag(), k.Key(), ValueName(k), short(k.String(k.Get(def))), short(k.Bounds()), strings.ReplaceAll(meaning, "|", `\|`))
	}
	return b.String()
}

// zeroSeconds and zeroMinutes are the zero units time.Duration.String writes after a
// larger one (1h0m0s): short drops them, so the README reads 1h, 5m.
var (
	zeroSeconds = regexp.MustCompile(`m0s\b`)
	zeroMinutes = regexp.MustCompile(`h0m\b`)
)

// short writes the durations in s without their zero units.
func short(s string) string {
	return zeroMinutes.ReplaceAllString(zeroSeconds.ReplaceAllString(s, "m"), "h")
}

// Readme replaces the README's policy table between its markers.
func Readme(old []byte) ([]byte, error) {
	s := string(old)
	i := strings.Index(s, readmeBegin)
	j := strings.Index(s, readmeEnd)
	if i < 0 || j < i {
		return nil, errors.New("no policy-knobs markers (" + strings.TrimSpace(readmeBegin) + " … " + strings.TrimSpace(readmeEnd) + ")")
	}
	if strings.Count(s, readmeBegin) != 1 || strings.Count(s, readmeEnd) != 1 {
		return nil, errors.New("the policy-knobs markers are there more than once")
	}
	return []byte(s[:i+len(readmeBegin)] + Table() + s[j:]), nil
}
