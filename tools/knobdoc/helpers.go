package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// HelpersFile is the chart's template helpers: knobdoc writes the knob
// table the validation templates range over between its markers.
const HelpersFile = "deploy/helm/cooldownd/templates/_helpers.tpl"

const (
	helpersBegin = "{{- /* policy-knobs:begin: generated from internal/breaker by go run ./tools/knobdoc (make generate); do not edit */}}\n"
	helpersEnd   = "{{- /* policy-knobs:end */}}\n"
)

// HelpersBlock is the generated part of _helpers.tpl: every knob's
// policy-file key with its chart value and kind, and the breaker's limits
// the rules left to the templates name.
func HelpersBlock() string {
	var b strings.Builder
	b.WriteString(`{{/*
The policy knobs (internal/breaker/knobs.go), in YAML: each policy-file key with its chart value
(policy.<value>) and its kind (count, ratio, span, switch); a span's own maximum in ms (maxMs) and
as written (max).
*/}}
{{- define "cooldownd.policyKnobs" -}}
`)
	for _, k := range breaker.Knobs() {
		if k.Kind == breaker.Span {
			fmt.Fprintf(&b, "%s: {value: %s, kind: %s, maxMs: %d, max: %s}\n", k.Key(), ValueName(k), tsKind(k),
				time.Duration(k.Max).Milliseconds(), short(k.String(k.Max)))
			continue
		}
		fmt.Fprintf(&b, "%s: {value: %s, kind: %s}\n", k.Key(), ValueName(k), tsKind(k))
	}
	b.WriteString("{{- end }}\n\n")
	fmt.Fprintf(&b, `{{/*
The breaker's limits (internal/breaker/policy.go) the rules between knobs name: MaxWindow (in ms and
as written) and MaxCount.
*/}}
{{- define "cooldownd.maxWindowMs" -}}
%d
{{- end }}
{{- define "cooldownd.maxWindow" -}}
%s
{{- end }}
{{- define "cooldownd.maxCount" -}}
%d
{{- end }}
`, breaker.MaxWindow.Milliseconds(), short(breaker.MaxWindow.String()), breaker.MaxCount)
	return b.String()
}

// Helpers replaces the generated block of _helpers.tpl between its markers.
func Helpers(old []byte) ([]byte, error) {
	return between(old, helpersBegin, helpersEnd, HelpersBlock())
}

// between replaces what lies between the markers begin and end (each on its
// own, once) with content.
func between(old []byte, begin, end, content string) ([]byte, error) {
	s := string(old)
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i {
		return nil, errors.New("no markers (" + strings.TrimSpace(begin) + " … " + strings.TrimSpace(end) + ")")
	}
	if strings.Count(s, begin) != 1 || strings.Count(s, end) != 1 {
		return nil, errors.New("the markers are there more than once")
	}
	return []byte(s[:i+len(begin)] + content + s[j:]), nil
}
