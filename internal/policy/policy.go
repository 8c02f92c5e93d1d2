// Package policy reads cooldownd's policy file: breaker policies per tenant
// and per connection-label pattern, layered over the server's flags.
//
//	default:                 # over the flags, for every tenant
//	  open_max: 2m
//	tenants:
//	  team-a:
//	    consecutive_failures: 3
//	    labels:              # first matching pattern wins (path.Match syntax)
//	      - match: "openai *"
//	        rate_limit_cooldown: 5s
//	      - match: "anthropic *"
//	        shadow: true     # a switch: true or false, nothing else
//
// A label rule may change any knob but max_probes, which fixes how many
// lease keys a connection has and so must be the same for all of a
// tenant's connections.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// ErrInvalid wraps every error of [Parse].
var ErrInvalid = errors.New("policy: invalid policy file")

// MaxFileBytes bounds a policy file.
const MaxFileBytes = 1 << 20

// setting is one knob a section of the file sets.
type setting struct {
	knob  *breaker.Knob
	value float64
}

// overrides are the knobs a section sets, in the file's order; a knob it
// does not set keeps the layer below.
type overrides []setting

func (o overrides) apply(p breaker.Policy) breaker.Policy {
	for _, s := range o {
		s.knob.Set(&p, s.value)
	}
	return p
}

type labelRule struct {
	match string
	set   overrides
}

type tenantSection struct {
	name   string
	set    overrides
	labels []labelRule
}

type file struct {
	def     overrides
	tenants []tenantSection
}

// syntaxError is a problem at a node of section where.
func syntaxError(where string, n *yaml.Node, format string, args ...any) error {
	if where == "" {
		where = "top level"
	}
	return fmt.Errorf("%w: %s: line %d: %s", ErrInvalid, where, n.Line, fmt.Sprintf(format, args...))
}

// mapping calls fn for each key of a mapping node (an empty or null node
// has none), refusing a key given twice.
func mapping(where string, n *yaml.Node, fn func(key string, k, v *yaml.Node) error) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return syntaxError(where, n, "want a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return syntaxError(where, k, "want a key")
		}
		if seen[k.Value] {
			return syntaxError(where, k, "%s is given twice", k.Value)
		}
		seen[k.Value] = true
		if err := fn(k.Value, k, v); err != nil {
			return err
		}
	}
	return nil
}

// knobTags are the YAML tags a knob's value may have, by kind: an integer
// for a count, a number for a ratio, a duration such as 10s (or 0) for a
// duration, a boolean for a switch.
var knobTags = map[breaker.Kind][]string{
	breaker.Count:  {"!!int"},
	breaker.Ratio:  {"!!int", "!!float"},
	breaker.Span:   {"!!str", "!!int"},
	breaker.Switch: {"!!bool"},
}

// knobValue reads a knob's value, as knobTags allows for its kind.
func knobValue(where string, k *breaker.Knob, n *yaml.Node) (float64, error) {
	if n.Kind != yaml.ScalarNode || !slices.Contains(knobTags[k.Kind], n.ShortTag()) {
		return 0, syntaxError(where, n, "%s: want %s", k.Key(), k.Format())
	}
	// A !!bool is true, True, TRUE or their false (YAML 1.2: yes and on
	// are strings, refused), each of which the knob's parser takes.
	v, err := k.Parse(n.Value)
	if err != nil {
		return 0, syntaxError(where, n, "%s: %v", k.Key(), err)
	}
	return v, nil
}

// section reads a section's knobs, and any other key with other (nil: a
// knob or nothing).
func section(where string, n *yaml.Node, other func(key string, v *yaml.Node) (bool, error)) (overrides, error) {
	var o overrides
	err := mapping(where, n, func(key string, kn, v *yaml.Node) error {
		if other != nil {
			if done, err := other(key, v); done || err != nil {
				return err
			}
		}
		k, ok := breaker.KnobByKey(key)
		if !ok {
			return syntaxError(where, kn, "unknown key %q", key)
		}
		x, err := knobValue(where, k, v)
		if err != nil {
			return err
		}
		o = append(o, setting{knob: k, value: x})
		return nil
	})
	return o, err
}

// parseFile reads the file's structure and its knobs' values (not yet
// validated as policies).
func parseFile(doc *yaml.Node) (file, error) {
	var f file
	if doc.Kind == 0 { // empty input
		return f, nil
	}
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	err := mapping("", root, func(key string, kn, v *yaml.Node) error {
		var err error
		switch key {
		case "default":
			f.def, err = section("default", v, nil)
		case "tenants":
			err = mapping("tenants", v, func(name string, _, tv *yaml.Node) error {
				t, err := tenant("tenants."+name, name, tv)
				f.tenants = append(f.tenants, t)
				return err
			})
		default:
			err = syntaxError("", kn, "unknown key %q (want default or tenants)", key)
		}
		return err
	})
	return f, err
}

func tenant(where, name string, n *yaml.Node) (tenantSection, error) {
	t := tenantSection{name: name}
	var err error
	t.set, err = section(where, n, func(key string, v *yaml.Node) (bool, error) {
		if key != "labels" {
			return false, nil
		}
		if v.Kind != yaml.SequenceNode {
			return true, syntaxError(where, v, "labels: want a list of rules")
		}
		for i, rn := range v.Content {
			lr, err := label(fmt.Sprintf("%s.labels[%d]", where, i), rn)
			if err != nil {
				return true, err
			}
			t.labels = append(t.labels, lr)
		}
		return true, nil
	})
	return t, err
}

func label(where string, n *yaml.Node) (labelRule, error) {
	var lr labelRule
	var err error
	lr.set, err = section(where, n, func(key string, v *yaml.Node) (bool, error) {
		if key != "match" {
			return false, nil
		}
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
			return true, syntaxError(where, v, "match: want a label pattern")
		}
		lr.match = v.Value
		return true, nil
	})
	if err != nil {
		return lr, err
	}
	if lr.match == "" {
		return lr, fmt.Errorf("%w: %s: match is required", ErrInvalid, where)
	}
	if _, err := path.Match(lr.match, ""); err != nil {
		return lr, fmt.Errorf("%w: %s: match %q is not a valid pattern", ErrInvalid, where, lr.match)
	}
	for _, s := range lr.set {
		if s.knob.TenantOnly {
			return lr, fmt.Errorf("%w: %s: %s can be set per tenant, not per label", ErrInvalid, where, s.knob.Key())
		}
	}
	return lr, nil
}

type rule struct {
	match  string
	policy breaker.Policy
}

type tenantPolicy struct {
	policy breaker.Policy
	labels []rule
}

// Resolver picks the policy of a tenant's connection. It is immutable and
// safe for concurrent use.
type Resolver struct {
	base    breaker.Policy
	tenants map[string]tenantPolicy
}

// Parse reads a policy file layered over base (the flags' policy). Every
// resolved policy is validated; errors name the section and the file's
// keys.
func Parse(data []byte, base breaker.Policy) (*Resolver, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxFileBytes)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	f, err := parseFile(&doc)
	if err != nil {
		return nil, err
	}
	r := &Resolver{base: f.def.apply(base), tenants: map[string]tenantPolicy{}}
	if err := r.base.Validate(); err != nil {
		return nil, invalid("default", err)
	}
	for _, sec := range f.tenants {
		if err := keys.ValidateTenant(sec.name); err != nil {
			return nil, fmt.Errorf("%w: tenants.%s: %w", ErrInvalid, sec.name, err)
		}
		tp := tenantPolicy{policy: sec.set.apply(r.base)}
		if err := tp.policy.Validate(); err != nil {
			return nil, invalid("tenants."+sec.name, err)
		}
		for i, lr := range sec.labels {
			p := lr.set.apply(tp.policy)
			if err := p.Validate(); err != nil {
				return nil, invalid(fmt.Sprintf("tenants.%s.labels[%d]", sec.name, i), err)
			}
			tp.labels = append(tp.labels, rule{match: lr.match, policy: p})
		}
		r.tenants[sec.name] = tp
	}
	return r, nil
}

// invalid wraps a policy validation error of section where, naming the
// file's keys.
func invalid(where string, err error) error {
	msg := err.Error()
	var pe *breaker.PolicyError
	if errors.As(err, &pe) {
		msg = pe.Message((*breaker.Knob).Key)
	}
	return &fileError{msg: fmt.Sprintf("%v: %s: %s", ErrInvalid, where, msg), err: err}
}

// fileError keeps both ErrInvalid and the validation error in the chain.
type fileError struct {
	msg string
	err error
}

func (e *fileError) Error() string   { return e.msg }
func (e *fileError) Unwrap() []error { return []error{ErrInvalid, e.err} }

// For returns the policy of a tenant's connection with this label: the
// first matching label rule of the tenant, else the tenant's, else the
// default. An empty label matches no rule.
func (r *Resolver) For(tenant, label string) breaker.Policy {
	tp, ok := r.tenants[tenant]
	if !ok {
		return r.base
	}
	if label != "" {
		for _, lr := range tp.labels {
			if ok, _ := path.Match(lr.match, label); ok {
				return lr.policy
			}
		}
	}
	return tp.policy
}
