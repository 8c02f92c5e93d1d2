package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const report = `Incompatible changes:
- Policy.TripQuorum: removed
- (*Client).Degraded: changed from func() bool to func() (bool, error)
- package github.com/cooldownd/cooldownd/client/clienttest: removed
Compatible changes:
- WithFoo: added
`

func changelog(unreleased string) string {
	return "# Changelog\n\n## [Unreleased]\n" + unreleased + "\n## [0.1.0] - 2026-12-01\n\n### Breaking\n\n- `Policy.TripQuorum`, `(*Client).Degraded`, clienttest\n"
}

func TestCheck(t *testing.T) {
	t.Parallel()
	all := "\n### Breaking\n\n- `Policy.TripQuorum` is cooldownd's alone.\n- `(*Client).Degraded` returns an error.\n" +
		"- Package `github.com/cooldownd/cooldownd/client/clienttest` is gone.\n"
	tests := []struct {
		name      string
		report    string
		changelog string
		missing   []string // the incompatible changes the error names; nil: no error
	}{
		{name: "no change", report: "", changelog: changelog("")},
		{name: "compatible changes pass", report: "Compatible changes:\n- WithFoo: added\n", changelog: changelog("")},
		{name: "incompatible, no Unreleased entry", report: report, changelog: changelog(""),
			missing: []string{"Policy.TripQuorum: removed", "(*Client).Degraded: changed", "clienttest: removed"}},
		{name: "named under an older release only", report: report, changelog: changelog("\n### Added\n\n- WithFoo\n"),
			missing: []string{"Policy.TripQuorum", "(*Client).Degraded", "clienttest"}},
		{name: "every change named", report: report, changelog: changelog(all)},
		{name: "named outside Breaking", report: report, changelog: changelog("\n### Changed\n\n- `Policy.TripQuorum`, `(*Client).Degraded`, `github.com/cooldownd/cooldownd/client/clienttest`\n"),
			missing: []string{"Policy.TripQuorum", "(*Client).Degraded", "clienttest"}},
		{name: "one of them unnamed", report: report,
			changelog: changelog("\n### Breaking\n\n- `Policy.TripQuorum` is cooldownd's alone.\n- Package `github.com/cooldownd/cooldownd/client/clienttest` is gone.\n"),
			missing:   []string{"(*Client).Degraded"}},
		{name: "a longer name is not the name", report: "Incompatible changes:\n- Policy: removed\n",
			changelog: changelog("\n### Breaking\n\n- `Policy.Jitter` changed.\n"), missing: []string{"Policy: removed"}},
		{name: "a name of another package of the module", report: "Incompatible changes:\n- ./clienttest.WithSleep: removed\n",
			changelog: changelog("\n### Breaking\n\n- `clienttest.WithSleep` is gone.\n")},
		{name: "unbracketed Unreleased", report: "Incompatible changes:\n- Policy: removed\n",
			changelog: "# Changelog\n\n## Unreleased\n\n### Breaking\n\n- `Policy` is gone.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			err := check(strings.NewReader(tt.report), tt.changelog, &out)
			if tt.missing == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, m := range tt.missing {
				assert.Contains(t, err.Error(), m)
			}
		})
	}
}

func TestCheckRefusesWhatIsNoReport(t *testing.T) {
	t.Parallel()
	err := check(strings.NewReader("loading github.com/x: no packages\n"), changelog(""), &strings.Builder{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not an apidiff report line")
}
