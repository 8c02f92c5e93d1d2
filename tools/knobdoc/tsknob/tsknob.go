// Package tsknob names internal/breaker's policy knobs and state fields as
// the TypeScript port (clients/ts/src/breaker.ts) holds them: the one
// mapping that tools/knobdoc writes into clients/ts/src/knobs.gen.ts and
// that clients/ts/tools/breakertrace writes its traces with, so the two
// cannot spell a field differently.
package tsknob

import (
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// legacyFields are the TypeScript Policy fields named otherwise than
// [Field]'s rule, kept because the TS client's public Policy has shipped
// them.
var legacyFields = map[string]string{
	"rate-limit-cooldown": "rateLimitDefaultMs",
}

// Field is the knob's field in the TypeScript Policy: the lowerCamel of its
// name, with Ms after a span's (open-base: openBaseMs).
func Field(k *breaker.Knob) string {
	if f, ok := legacyFields[k.Name]; ok {
		return f
	}
	parts := strings.Split(k.Name, "-")
	for i, p := range parts[1:] {
		parts[i+1] = strings.ToUpper(p[:1]) + p[1:]
	}
	f := strings.Join(parts, "")
	if k.Kind == breaker.Span {
		f += "Ms"
	}
	return f
}

// Value is the knob's value in p as the TypeScript Policy holds it: a
// number (a span in milliseconds, fractional when the duration is), or a
// boolean for a switch.
func Value(k *breaker.Knob, p breaker.Policy) any {
	v := k.Get(p)
	switch k.Kind {
	case breaker.Count:
		return int64(v)
	case breaker.Switch:
		return v != 0
	case breaker.Span:
		return v / float64(time.Millisecond)
	default:
		return v
	}
}

// Policy is p as the TypeScript Policy, by field: what the traces carry.
func Policy(p breaker.Policy) map[string]any {
	out := map[string]any{}
	for _, k := range breaker.Knobs() {
		out[Field(k)] = Value(k, p)
	}
	return out
}

// Name is a Go field's name in TypeScript: its leading capitals lowered, the
// last of a run kept when a lower-case letter follows (ID: id, HTTPStatus:
// httpStatus, OpenUntil: openUntil).
func Name(goName string) string {
	r := []rune(goName)
	n := 0
	for n < len(r) && unicode.IsUpper(r[n]) {
		n++
	}
	if n > 1 && n < len(r) {
		n--
	}
	for i := range n {
		r[i] = unicode.ToLower(r[i])
	}
	return string(r)
}

// JSON is v (a breaker state, or a struct or slice in it) as the TypeScript
// port holds it, by field: every exported field under its [Name], a named
// integer (Phase, Cause) as its number, a nil slice as an empty one. It
// panics on a kind the port has no shape for, so that a new field of an
// unforeseen type fails the trace generator and its test.
func JSON(v any) any { return jsonOf(reflect.ValueOf(v)) }

func jsonOf(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Struct:
		out := map[string]any{}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				out[Name(f.Name)] = jsonOf(v.Field(i))
			}
		}
		return out
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = jsonOf(v.Index(i))
		}
		return out
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint()
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	}
	panic(fmt.Sprintf("tsknob: no TypeScript shape for a %s", v.Type()))
}

// Type is the TypeScript type of a Go type in the state's shapes: number,
// string, boolean, a struct's own name (its interface is generated beside
// it) or an array of one.
func Type(t reflect.Type) (string, error) {
	switch t.Kind() {
	case reflect.Struct:
		return t.Name(), nil
	case reflect.Slice:
		e, err := Type(t.Elem())
		return e + "[]", err
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "number", nil
	case reflect.String:
		return "string", nil
	case reflect.Bool:
		return "boolean", nil
	}
	return "", fmt.Errorf("tsknob: no TypeScript shape for a %s", t)
}
