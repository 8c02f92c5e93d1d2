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
	"google.golang.org/protobuf/types/known/durationpb"

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

// TestShadowSwitch: the shadow knob, set by the flag, its variable or a
// label rule of the policy file, puts the connections it covers in shadow
// mode: a rate-limited connection is allowed and the answer says it would
// have been denied; one it does not cover stays enforced.
func TestShadowSwitch(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(file, []byte("tenants:\n  default:\n    labels:\n      - match: 'shadow *'\n        shadow: true\n"), 0o600))
	off := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(off, []byte("tenants:\n  default:\n    labels:\n      - match: 'live *'\n        shadow: false\n"), 0o600))
	tests := []struct {
		name       string
		env        map[string]string
		args       []string
		shadow     bool // "shadow gpt"
		liveShadow bool // "live gpt"
	}{
		{"default", nil, nil, false, false},
		{"--shadow", nil, []string{"--shadow"}, true, true},
		{"--shadow=true", nil, []string{"--shadow=true"}, true, true},
		{"COOLDOWND_SHADOW=true", map[string]string{"COOLDOWND_SHADOW": "true"}, nil, true, true},
		{"--shadow=false over COOLDOWND_SHADOW=true", map[string]string{"COOLDOWND_SHADOW": "true"}, []string{"--shadow=false"}, false, false},
		{"a label rule", nil, []string{"--policy-file", file}, true, false},
		{"a label rule off under --shadow", nil, []string{"--shadow", "--policy-file", off}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := startEnv(t, tt.env, append([]string{"--addr", "127.0.0.1:0"}, tt.args...)...)
			c := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url())
			for i, tc := range []struct {
				label  string
				shadow bool
			}{{"shadow gpt", tt.shadow}, {"live gpt", tt.liveShadow}} {
				conn := &cooldownv1.Connection{Id: newID(byte(i + 1)), Label: tc.label}
				_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn,
					Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: durationpb.New(time.Minute)}))
				require.NoError(t, err)
				res, err := c.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{conn}}))
				require.NoError(t, err)
				if tc.shadow {
					assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, res.Msg.GetDecision(), tc.label)
					assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, res.Msg.GetShadowDenyReason(), tc.label)
				} else {
					assert.Equal(t, cooldownv1.Decision_DECISION_DENY, res.Msg.GetDecision(), tc.label)
					assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED, res.Msg.GetShadowDenyReason(), tc.label)
				}
				got, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: conn.GetId()}))
				require.NoError(t, err)
				assert.Equal(t, tc.shadow, got.Msg.GetPolicy().GetShadow(), tc.label)
				assert.Equal(t, tc.shadow, got.Msg.GetConnection().GetShadow(), tc.label)
			}
		})
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
		{"a switch as a word", "default:\n  shadow: yes\n", "default: line 2: shadow: want true or false", "--shadow"},
		{"a switch quoted", "tenants:\n  default:\n    shadow: 'true'\n", "tenants.default: line 3: shadow: want true or false", "--shadow"},
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
