// Package schema is the one declaration of the boundary between the store's
// Go code and its Lua scripts: the policy argument's positions, the state
// hash's fields, each script's reply fields and the codes both sides agree
// on. tools/luaschema generates from it internal/store/lua/schema.lua (the
// names the scripts use) and internal/store/schema_gen.go (the Go packing
// of the policy and the by-name decoding of the replies); make generate
// runs it and make check-generate holds the output to this file.
//
// The policy's knobs come from internal/breaker's knob table and the enums
// from its String methods: a knob added there reaches the scripts with no
// edit here.
package schema

import (
	"fmt"
	"strings"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// Unit is how a policy value is written in the scripts' argument.
type Unit int

// The units of the policy argument.
const (
	// Millis is a duration in whole milliseconds.
	Millis Unit = iota + 1
	// Integer is a count as it is.
	Integer
	// BasisPoints is a fraction in basis points (0.5 is 5000), rounded.
	BasisPoints
	// Float is a fraction as Go's shortest 'g' form writes it.
	Float
	// Flag is 1 or 0.
	Flag
)

// PolicyField is one value of the scripts' packed policy argument: a knob
// of the table, or one of the store's own (Knob nil).
type PolicyField struct {
	// Name is the field of P in the scripts (the knob's Script).
	Name string
	Unit Unit
	// Knob is the knob the value comes from; nil for the store's own.
	Knob *breaker.Knob
	Doc  string
}

// fastHead are the policy's first values, in order: the fast paths
// (admit_fast.lua, report_fast.lua) read only these, with one
// string.match of POLICY_HEAD, so they come before every other knob.
var fastHead = []string{"idle", "rate_bp", "window", "fleet_window", "budget_bp", "throttle_k", "shadow"}

// FastHead returns the names of the policy's first values (see POLICY_HEAD
// in schema.lua).
func FastHead() []string { return append([]string(nil), fastHead...) }

// basisPoints are the Ratio knobs the scripts compare in exact integers.
var basisPoints = map[string]bool{"failure-rate": true, "retry-budget": true}

// Policy returns the policy argument's values in order: idle TTL (the
// store's), the fast paths' head, every other knob in the table's order,
// then the history cap (the store's). A knob added to the table is
// appended before the history cap.
func Policy() []PolicyField {
	extra := map[string]PolicyField{
		"idle":    {Name: "idle", Unit: Millis, Doc: "the store's idle TTL (Options.IdleTTL)"},
		"history": {Name: "history", Unit: Integer, Doc: "the store's history cap (Options.HistoryLen)"},
	}
	byScript := map[string]*breaker.Knob{}
	for _, k := range breaker.Knobs() {
		byScript[k.Script] = k
	}
	field := func(name string) PolicyField {
		if f, ok := extra[name]; ok {
			return f
		}
		k := byScript[name]
		if k == nil {
			panic(fmt.Sprintf("schema: the policy head names %q, no knob's Script", name))
		}
		return PolicyField{Name: name, Unit: unit(k), Knob: k, Doc: "--" + k.Name}
	}
	var out []PolicyField
	seen := map[string]bool{}
	for _, name := range fastHead {
		out = append(out, field(name))
		seen[name] = true
	}
	for _, k := range breaker.Knobs() {
		if !seen[k.Script] {
			out = append(out, field(k.Script))
		}
	}
	return append(out, field("history"))
}

func unit(k *breaker.Knob) Unit {
	switch k.Kind {
	case breaker.Span:
		return Millis
	case breaker.Switch:
		return Flag
	case breaker.Ratio:
		if basisPoints[k.Name] {
			return BasisPoints
		}
		return Float
	default:
		return Integer
	}
}

// StateField is one field of a connection's state hash.
type StateField struct {
	// Name is the field's name in the scripts' state table (s.name) and in
	// the state sent to Go (stateJSON).
	Name string
	// Hash is its short name in the hash, stable across versions: only
	// schema.lua spells it.
	Hash string
	// Text is a string field; the others are integers.
	Text bool
}

// State returns the state hash's fields in the order load reads them.
func State() []StateField {
	return []StateField{
		{"phase", "ph", false}, {"cause", "ca", false}, {"revision", "rv", false}, {"open_until", "ou", false},
		{"reopens", "ro", false}, {"consecutive", "cf", false}, {"window_start", "ws", false},
		{"prev_calls", "wpc", false}, {"prev_fails", "wpf", false}, {"cur_calls", "wcc", false},
		{"cur_fails", "wcf", false}, {"override", "ov", false}, {"override_until", "ovu", false},
		{"successes", "sc", false}, {"failures", "fc", false}, {"last_status", "ls", false},
		{"last_outcome", "lo", false}, {"last_error", "le", true}, {"changed_at", "cat", false},
		{"updated_at", "uat", false}, {"label", "lb", true}, {"fleet_start", "fs", false},
		{"prev_firsts", "fpf", false}, {"cur_firsts", "fcf", false}, {"prev_retries", "fpr", false},
		{"cur_retries", "fcr", false}, {"prev_requests", "fpq", false}, {"cur_requests", "fcq", false},
		{"prev_accepts", "fpa", false}, {"cur_accepts", "fca", false},
		// The trip quorum's "id:at,id:at" (State.Reporters, oldest first;
		// ids have no ':' or ',').
		{"reporters", "qr", true},
	}
}

// HashExtras are the state hash's fields beyond State: each lease slot n is
// lease_token..n and lease_expires..n; expires_at is when the keys expire
// (Unix ms, 0 never), kept beside them so a fast path knows without a
// command whether their TTL is due for a refresh.
func HashExtras() []StateField {
	return []StateField{{"lease_token", "lt", true}, {"lease_expires", "lx", false}, {"expires_at", "xp", false}}
}

// Type is how a reply value is sent and decoded.
type Type int

// The types of reply values.
const (
	// Int is an integer.
	Int Type = iota + 1
	// Bool is 1 or 0.
	Bool
	// Str is a string.
	Str
	// Prob is a probability sent as a string ('%.17g').
	Prob
	// JSON is prelude/state.lua's state_table, encoded as JSON.
	JSON
	// Strs is a nested array of strings.
	Strs
)

// Field is one value of a reply.
type Field struct {
	Name string
	Type Type
}

// Reply is one script's reply: its fields in order, then (Events) the
// transitions the call applied: n, then from, to, cause for each.
type Reply struct {
	// Name names the reply: NAME_REPLY and NAME_AT in schema.lua, nameReply
	// in Go.
	Name string
	// Script is the script that answers it.
	Script string
	Fields []Field
	Events bool
}

// Replies returns every script's reply.
func Replies() []Reply {
	return []Reply{
		{Name: "admit", Script: "admit.lua", Fields: []Field{{"now", Int}, {"decided", Int}}},
		{Name: "candidate", Script: "admit.lua", Events: true, Fields: []Field{
			{"decision", Int}, {"reason", Int}, {"retry_after", Int}, {"revision", Int}, {"phase", Int},
			{"lease_token", Str}, {"lease_expires", Int}, {"lease_expired", Bool}, {"exists", Bool}, {"wake", Int},
			{"shadowed", Int}, {"shadow_retry_after", Int}, {"throttle", Prob}, {"written_at", Int},
		}},
		{Name: "report", Script: "report.lua", Events: true, Fields: []Field{
			{"status", Int}, {"accepted", Bool}, {"changed", Bool}, {"created", Bool}, {"revision", Int},
			{"phase", Int}, {"now", Int}, {"wake", Int}, {"throttle", Prob}, {"written_at", Int},
		}},
		{Name: "extend", Script: "extend.lua", Events: true, Fields: []Field{
			{"slot", Int}, {"expires", Int}, {"now", Int}, {"wake", Int},
		}},
		{Name: "get", Script: "get.lua", Events: true, Fields: []Field{
			{"exists", Bool}, {"wake", Int}, {"state", JSON}, {"history", Strs},
		}},
		{Name: "force", Script: "force.lua", Events: true, Fields: []Field{
			{"status", Int}, {"exists", Bool}, {"wake", Int}, {"state", JSON},
		}},
	}
}

// Value is one named code of an enum.
type Value struct {
	Name string
	Code int
}

// Enum is a set of named codes.
type Enum struct {
	Name   string
	Doc    string
	Values []Value
}

// named lists the codes 0..31 of an enum of internal/breaker that have a
// name (String is not kind(N), "" or "unspecified"), upper-cased.
func named[T ~uint8](kind string) []Value {
	var out []Value
	for c := range 32 {
		s := fmt.Sprint(T(c))
		if s == "" || s == "unspecified" || strings.HasPrefix(s, kind+"(") {
			continue
		}
		out = append(out, Value{strings.ToUpper(s), c})
	}
	return out
}

// Enums returns the codes the scripts and Go agree on: internal/breaker's
// (and the wire's) and the store's own.
func Enums() []Enum {
	return []Enum{
		{"DECISION", "internal/breaker's Decision", named[breaker.Decision]("decision")},
		{"REASON", "internal/breaker's DenyReason", named[breaker.DenyReason]("reason")},
		{"PHASE", "internal/breaker's Phase", named[breaker.Phase]("phase")},
		{"CAUSE", "internal/breaker's Cause", named[breaker.Cause]("cause")},
		{"OUTCOME", "internal/breaker's Outcome", named[breaker.Outcome]("outcome")},
		{"OVERRIDE", "internal/breaker's Override", named[breaker.Override]("override")},
		{"STATUS", "the first value of a writing script's reply: APPLIED; UNREGISTERED when the connection " +
			"does not exist and the store has not just registered it (nothing was written: the store registers " +
			"it and runs the script again); a report also answers REPLAYED (its idempotency key named a report " +
			"already applied: its first reply) or REUSED, alone (the key named a different report)",
			[]Value{{"APPLIED", 1}, {"UNREGISTERED", 2}, {"REPLAYED", 3}, {"REUSED", 4}}},
		{"FORCE", "force.lua's operation (ARGV[5]): internal/breaker's Override, or RESET",
			[]Value{{"CLEAR", int(breaker.NoOverride)}, {"OPEN", int(breaker.ForcedOpen)},
				{"CLOSED", int(breaker.ForcedClosed)}, {"RESET", 3}}},
		{"ADMIT", "admit.lua's own decision: UNDECIDED, a peek that needs a write to decide",
			[]Value{{"UNDECIDED", 0}}},
		{"TENANT", "tenant.lua's answers", []Value{{"AT_CAP", 0}, {"OK", 1}, {"KEPT", 2}}},
		{"LIMIT", "internal/breaker's bounds: MaxCount, MaxReopens, ThrottleRetryAfter (ms)",
			[]Value{{"MAX_COUNT", breaker.MaxCount}, {"MAX_REOPENS", breaker.MaxReopens},
				{"THROTTLE_RETRY_AFTER", breaker.ThrottleRetryAfter}}},
	}
}
