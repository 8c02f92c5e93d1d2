package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

type clients struct {
	cooldown cooldownv1connect.CooldownServiceClient
	admin    cooldownv1connect.AdminServiceClient
}

func TestValidation(t *testing.T) {
	t.Parallel()
	ok := newID()
	report := func(mod func(*cooldownv1.ReportRequest)) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			req := &cooldownv1.ReportRequest{Connection: conn(ok), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS}
			mod(req)
			_, err := c.cooldown.Report(ctx, connect.NewRequest(req))
			return err
		}
	}
	admitLabel := func(label string) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			_, err := c.cooldown.Admit(ctx, connect.NewRequest(&cooldownv1.AdmitRequest{
				Candidates: []*cooldownv1.Connection{{Id: ok, Label: label}},
			}))
			return err
		}
	}
	admitN := func(n int) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			ids := make([][]byte, n)
			for i := range ids {
				ids[i] = newID()
			}
			_, err := c.cooldown.Admit(ctx, admitReq(ids...))
			return err
		}
	}
	tests := []struct {
		name  string
		call  func(context.Context, clients) error
		field string
	}{
		{"no candidates", admitN(0), "candidates"},
		{"17 candidates", admitN(17), "candidates"},
		{"candidate id 31 bytes", func(ctx context.Context, c clients) error {
			_, err := c.cooldown.Admit(ctx, admitReq(ok, make([]byte, 31)))
			return err
		}, "candidates[1].id"},
		{"candidate id 33 bytes", func(ctx context.Context, c clients) error {
			_, err := c.cooldown.Admit(ctx, admitReq(make([]byte, 33)))
			return err
		}, "candidates[0].id"},
		{"candidate without id", func(ctx context.Context, c clients) error {
			_, err := c.cooldown.Admit(ctx, admitReq(nil))
			return err
		}, "candidates[0].id"},
		{"label too long", admitLabel(strings.Repeat("a", 65)), "candidates[0].label"},
		{"label openai key", admitLabel("sk-proj-abc123"), "candidates[0].label"},
		{"label bearer", admitLabel("Bearer x"), "candidates[0].label"},
		{"label jwt", admitLabel("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"), "candidates[0].label"},
		{"label url userinfo", admitLabel("https://user:pw@host"), "candidates[0].label"},
		{"label random key", admitLabel("Zq3xT9vLm2Pa8RkW4nYc7HbJ5dFs1GeU6tAo0iXw"), "candidates[0].label"},
		{"label control char", admitLabel("openai\x00gpt"), "candidates[0].label"},
		{"report id 31 bytes", report(func(r *cooldownv1.ReportRequest) { r.Connection.Id = make([]byte, 31) }), "connection.id"},
		{"report without connection", report(func(r *cooldownv1.ReportRequest) { r.Connection = nil }), "connection"},
		{"report secret label", report(func(r *cooldownv1.ReportRequest) { r.Connection.Label = "sk-ant-api03-xyz" }), "connection.label"},
		{"outcome unspecified", report(func(r *cooldownv1.ReportRequest) { r.Outcome = 0 }), "outcome"},
		{"outcome 99", report(func(r *cooldownv1.ReportRequest) { r.Outcome = 99 }), "outcome"},
		{"outcome 257 (uint8 wrap)", report(func(r *cooldownv1.ReportRequest) { r.Outcome = 257 }), "outcome"},
		{"outcome negative", report(func(r *cooldownv1.ReportRequest) { r.Outcome = -1 }), "outcome"},
		{"retry_after negative", report(func(r *cooldownv1.ReportRequest) { r.RetryAfter = durationpb.New(-time.Second) }), "retry_after"},
		{"retry_after over 24h", report(func(r *cooldownv1.ReportRequest) { r.RetryAfter = durationpb.New(25 * time.Hour) }), "retry_after"},
		{"retry_after invalid", report(func(r *cooldownv1.ReportRequest) { r.RetryAfter = &durationpb.Duration{Seconds: 1, Nanos: -1} }), "retry_after"},
		{"http_status 1000", report(func(r *cooldownv1.ReportRequest) { r.HttpStatus = 1000 }), "http_status"},
		{"http_status 42", report(func(r *cooldownv1.ReportRequest) { r.HttpStatus = 42 }), "http_status"},
		{"error_code with spaces", report(func(r *cooldownv1.ReportRequest) { r.ErrorCode = "rate limit" }), "error_code"},
		{"error_code too long", report(func(r *cooldownv1.ReportRequest) { r.ErrorCode = strings.Repeat("x", 65) }), "error_code"},
		{"lease_token too long", report(func(r *cooldownv1.ReportRequest) { r.LeaseToken = strings.Repeat("x", 129) }), "lease_token"},
		{"reporter too long", report(func(r *cooldownv1.ReportRequest) { r.Reporter = strings.Repeat("r", 65) }), "reporter"},
		{"reporter with a space", report(func(r *cooldownv1.ReportRequest) { r.Reporter = "pod 7" }), "reporter"},
		{"reporter with a slash", report(func(r *cooldownv1.ReportRequest) { r.Reporter = "ns/pod" }), "reporter"},
		{"reporter not ASCII", report(func(r *cooldownv1.ReportRequest) { r.Reporter = "prozeß" }), "reporter"},
		{"idempotency_key too short", report(func(r *cooldownv1.ReportRequest) { r.IdempotencyKey = strings.Repeat("k", 15) }), "idempotency_key"},
		{"idempotency_key too long", report(func(r *cooldownv1.ReportRequest) { r.IdempotencyKey = strings.Repeat("k", 65) }), "idempotency_key"},
		{"idempotency_key with a brace", report(func(r *cooldownv1.ReportRequest) { r.IdempotencyKey = "0123456789abcdef}" }), "idempotency_key"},
		{"idempotency_key with a colon", report(func(r *cooldownv1.ReportRequest) { r.IdempotencyKey = "0123456789:abcdef" }), "idempotency_key"},
		{"idempotency_key padded base64", report(func(r *cooldownv1.ReportRequest) { r.IdempotencyKey = "AAAAAAAAAAAAAAAAAAAAAA==" }), "idempotency_key"},
		{"idempotency_key not ASCII", report(func(r *cooldownv1.ReportRequest) { r.IdempotencyKey = "0123456789abcdeß" }), "idempotency_key"},
		{"more retry entries than candidates", func(ctx context.Context, c clients) error {
			req := admitReq(ok, newID())
			req.Msg.Retry = []bool{true, false, true}
			_, err := c.cooldown.Admit(ctx, req)
			return err
		}, "retry"},
		{"extend without token", func(ctx context.Context, c clients) error {
			_, err := c.cooldown.ExtendLease(ctx, connect.NewRequest(&cooldownv1.ExtendLeaseRequest{Connection: conn(ok)}))
			return err
		}, "lease_token"},
		{"page_size 501", func(ctx context.Context, c clients) error {
			_, err := c.cooldown.ListConnections(ctx, connect.NewRequest(&cooldownv1.ListConnectionsRequest{PageSize: 501}))
			return err
		}, "page_size"},
		{"bad page_token", func(ctx context.Context, c clients) error {
			_, err := c.cooldown.ListConnections(ctx, connect.NewRequest(&cooldownv1.ListConnectionsRequest{PageToken: "not-a-token"}))
			return err
		}, "page_token"},
		{"get id 33 bytes", func(ctx context.Context, c clients) error {
			_, err := c.cooldown.GetConnection(ctx, connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: make([]byte, 33)}))
			return err
		}, "id"},
		{"history_limit 51", func(ctx context.Context, c clients) error {
			_, err := c.cooldown.GetConnection(ctx, connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: ok, HistoryLimit: 51}))
			return err
		}, "history_limit"},
		{"reset reason too long", func(ctx context.Context, c clients) error {
			_, err := c.admin.ResetConnection(ctx, connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: ok, Reason: strings.Repeat("r", 257)}))
			return err
		}, "reason"},
		{"reset id 31 bytes", func(ctx context.Context, c clients) error {
			_, err := c.admin.ResetConnection(ctx, connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: make([]byte, 31)}))
			return err
		}, "id"},
		{"override 7", func(ctx context.Context, c clients) error {
			_, err := c.admin.ForceConnection(ctx, connect.NewRequest(&cooldownv1.ForceConnectionRequest{Id: ok, Override: 7}))
			return err
		}, "override"},
		{"override 258 (uint8 wrap)", func(ctx context.Context, c clients) error {
			_, err := c.admin.ForceConnection(ctx, connect.NewRequest(&cooldownv1.ForceConnectionRequest{Id: ok, Override: 258}))
			return err
		}, "override"},
		{"force duration negative", func(ctx context.Context, c clients) error {
			_, err := c.admin.ForceConnection(ctx, connect.NewRequest(&cooldownv1.ForceConnectionRequest{
				Id: ok, Override: cooldownv1.Override_OVERRIDE_FORCED_OPEN, Duration: durationpb.New(-time.Second),
			}))
			return err
		}, "duration"},
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := clients{cooldown: e.cooldown(p.opts...), admin: e.admin(p.opts...)}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					err := tt.call(t.Context(), c)
					requireCode(t, err, connect.CodeInvalidArgument, tt.field+":")
				})
			}
		})
	}
}

// TestFleetFieldsAccepted: the fleet rules' request fields at their
// bounds are accepted.
func TestFleetFieldsAccepted(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.cooldown(p.opts...)
			a, b := newID(), newID()
			for _, retry := range [][]bool{nil, {true}, {false, true}, {true, true}} {
				req := admitReq(a, b)
				req.Msg.Retry = retry
				res, err := c.Admit(t.Context(), req)
				require.NoError(t, err, "retry %v", retry)
				assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, res.Msg.GetDecision(), "FastPolicy has no retry budget")
			}
			for _, reporter := range []string{"", "a", strings.Repeat("Z", 64), "pod-7.ns_1", "3f2b8c1e-7a4d-4e9b-9c0f-1d2e3f4a5b6c"} {
				_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
					Connection: conn(a), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, Retry: true, Reporter: reporter,
				}))
				require.NoError(t, err, "reporter %q", reporter)
			}
		})
	}
}

// TestValidationLeavesNoState: rejected requests write nothing.
func TestValidationLeavesNoState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.cooldown()
	_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: &cooldownv1.Connection{Id: newID(), Label: "Bearer abc"}, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED,
	}))
	requireCode(t, err, connect.CodeInvalidArgument, "connection.label")
	assert.Empty(t, e.mini.Keys(), "a rejected report must not reach Redis")
}

func TestRequestTooLarge(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.cooldown(p.opts...)
			req := &cooldownv1.AdmitRequest{}
			for range 20 {
				req.Candidates = append(req.Candidates, &cooldownv1.Connection{Id: newID(), Label: strings.Repeat("x", 4<<10)})
			}
			_, err := c.Admit(t.Context(), connect.NewRequest(req))
			require.Error(t, err)
			assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "error: %v", err)

			// The server is unharmed.
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, admit(t, c, newID()).GetDecision())
		})
	}
}
