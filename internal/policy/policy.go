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
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// ErrInvalid wraps every error of [Parse].
var ErrInvalid = errors.New("policy: invalid policy file")

// MaxFileBytes bounds a policy file.
const MaxFileBytes = 1 << 20

// Overrides are the knobs a layer sets; nil keeps the layer below.
type Overrides struct {
	ConsecutiveFailures *int      `yaml:"consecutive_failures"`
	FailureRate         *float64  `yaml:"failure_rate"`
	MinCalls            *int      `yaml:"min_calls"`
	Window              *Duration `yaml:"window"`
	OpenBase            *Duration `yaml:"open_base"`
	OpenMax             *Duration `yaml:"open_max"`
	Jitter              *float64  `yaml:"jitter"`
	RateLimitCooldown   *Duration `yaml:"rate_limit_cooldown"`
	OverloadFloor       *Duration `yaml:"overload_floor"`
	QuotaBlock          *Duration `yaml:"quota_block"`
	AuthBlock           *Duration `yaml:"auth_block"`
	MaxProbes           *int      `yaml:"max_probes"`
	LeaseTTL            *Duration `yaml:"lease_ttl"`
}

// Duration is a time.Duration written as "10s", "5m".
type Duration struct{ time.Duration }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as 10s", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration such as 10s", n.Line, s)
	}
	d.Duration = v
	return nil
}

func (o Overrides) apply(p breaker.Policy) breaker.Policy {
	setI := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setF := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	setD := func(dst *time.Duration, v *Duration) {
		if v != nil {
			*dst = v.Duration
		}
	}
	setI(&p.ConsecutiveFailures, o.ConsecutiveFailures)
	setF(&p.FailureRate, o.FailureRate)
	setI(&p.MinCalls, o.MinCalls)
	setD(&p.Window, o.Window)
	setD(&p.OpenBase, o.OpenBase)
	setD(&p.OpenMax, o.OpenMax)
	setF(&p.Jitter, o.Jitter)
	setD(&p.RateLimitDefault, o.RateLimitCooldown)
	setD(&p.OverloadFloor, o.OverloadFloor)
	setD(&p.QuotaBlock, o.QuotaBlock)
	setD(&p.AuthBlock, o.AuthBlock)
	setI(&p.MaxProbes, o.MaxProbes)
	setD(&p.LeaseTTL, o.LeaseTTL)
	return p
}

type labelRule struct {
	Match     string `yaml:"match"`
	Overrides `yaml:",inline"`
}

type tenantSection struct {
	Overrides `yaml:",inline"`
	Labels    []labelRule `yaml:"labels"`
}

type file struct {
	Default Overrides                `yaml:"default"`
	Tenants map[string]tenantSection `yaml:"tenants"`
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
// resolved policy is validated; errors name the section.
func Parse(data []byte, base breaker.Policy) (*Resolver, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxFileBytes)
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	r := &Resolver{base: f.Default.apply(base), tenants: map[string]tenantPolicy{}}
	if err := r.base.Validate(); err != nil {
		return nil, invalid("default", err)
	}
	for name, sec := range f.Tenants {
		if err := keys.ValidateTenant(name); err != nil {
			return nil, fmt.Errorf("%w: tenants.%s: %w", ErrInvalid, name, err)
		}
		tp := tenantPolicy{policy: sec.apply(r.base)}
		if err := tp.policy.Validate(); err != nil {
			return nil, invalid("tenants."+name, err)
		}
		for i, lr := range sec.Labels {
			where := fmt.Sprintf("tenants.%s.labels[%d]", name, i)
			if lr.Match == "" {
				return nil, fmt.Errorf("%w: %s: match is required", ErrInvalid, where)
			}
			if _, err := path.Match(lr.Match, ""); err != nil {
				return nil, fmt.Errorf("%w: %s: match %q is not a valid pattern", ErrInvalid, where, lr.Match)
			}
			if lr.MaxProbes != nil {
				return nil, fmt.Errorf("%w: %s: max_probes can be set per tenant, not per label", ErrInvalid, where)
			}
			p := lr.apply(tp.policy)
			if err := p.Validate(); err != nil {
				return nil, invalid(where, err)
			}
			tp.labels = append(tp.labels, rule{match: lr.Match, policy: p})
		}
		r.tenants[name] = tp
	}
	return r, nil
}

// fileKeys maps the field names in breaker.Policy.Validate's errors to the
// file's own keys where they differ.
var fileKeys = strings.NewReplacer(
	breaker.ErrInvalidPolicy.Error()+": ", "",
	"rate_limit_default", "rate_limit_cooldown",
)

// invalid wraps a policy validation error of section where, naming the
// file's keys (rate_limit_cooldown, not the Go field's name).
func invalid(where string, err error) error {
	return &fileError{msg: fmt.Sprintf("%v: %s: %s", ErrInvalid, where, fileKeys.Replace(err.Error())), err: err}
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
