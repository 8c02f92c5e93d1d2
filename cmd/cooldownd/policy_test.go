package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// TestPolicyFile: a label rule of the default tenant changes the cooldown
// of matching connections only.
func TestPolicyFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(path, []byte("tenants:\n  default:\n    labels:\n      - match: 'openai *'\n        rate_limit_cooldown: 1m\n"), 0o600))
	in := start(t, "--addr", "127.0.0.1:0", "--policy-file", path)
	c := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url())
	for _, tc := range []struct {
		label string
		id    byte
		max   time.Duration
		min   time.Duration
	}{{"openai gpt-4o", 1, time.Minute, 59 * time.Second}, {"anthropic claude", 2, 2 * time.Second, time.Second}} {
		conn := &cooldownv1.Connection{Id: newID(tc.id), Label: tc.label}
		_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED}))
		require.NoError(t, err)
		res, err := c.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{conn}}))
		require.NoError(t, err)
		ra := res.Msg.GetRetryAfter().AsDuration()
		assert.LessOrEqual(t, ra, tc.max, tc.label)
		assert.Greater(t, ra, tc.min, tc.label)
	}
}

// TestPolicyFileErrors: a refused policy file stops the start, and its
// error names the file's section and key, never the flag of the knob.
func TestPolicyFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, doc, want, not string }{
		{"max_probes per label", "tenants:\n  default:\n    labels:\n      - match: '*'\n        max_probes: 3\n",
			"tenants.default.labels[0]: max_probes can be set per tenant, not per label", "--max-probes"},
		{"a knob's bound", "default:\n  lease_ttl: 0s\n", "default: lease_ttl must be in [1ms, 168h0m0s], got 0s", "--lease-ttl"},
		{"two knobs", "tenants:\n  default:\n    open_base: 1m\n    open_max: 1s\n", "tenants.default: open_max (1s) must be at least open_base (1m0s)", "--open"},
		{"the flag's name as a key", "default:\n  rate-limit-cooldown: 1s\n", `default: line 2: unknown key "rate-limit-cooldown"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "policies.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tt.doc), 0o600))
			err := run(t.Context(), []string{"--addr", "127.0.0.1:0", "--policy-file", path}, envOf(nil), io.Discard, new(syncBuffer), nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			if tt.not != "" {
				assert.NotContains(t, err.Error(), tt.not)
			}
		})
	}
}
