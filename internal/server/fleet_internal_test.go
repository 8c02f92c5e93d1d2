package server

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// fieldViolation is the one BadRequest field violation of an
// invalid_argument error.
func fieldViolation(t *testing.T, err error) *errdetails.BadRequest_FieldViolation {
	t.Helper()
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	var out []*errdetails.BadRequest_FieldViolation
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if br, ok := v.(*errdetails.BadRequest); ok {
			out = append(out, br.GetFieldViolations()...)
		}
	}
	require.Len(t, out, 1)
	return out[0]
}

func testIDs(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, 32)
		out[i][0] = byte(i + 1)
	}
	return out
}

// TestAdmitConnsRetry: AdmitRequest.retry marks each candidate, in order,
// a missing entry being a first attempt; more entries than candidates is
// invalid_argument naming retry.
func TestAdmitConnsRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cands int
		retry []bool
		want  []bool // per candidate; nil: refused
	}{
		{"none", 3, nil, []bool{false, false, false}},
		{"the primary a retry", 3, []bool{true}, []bool{true, false, false}},
		{"a fallback a retry", 3, []bool{false, true}, []bool{false, true, false}},
		{"all", 3, []bool{true, true, true}, []bool{true, true, true}},
		{"explicit false", 2, []bool{false, false}, []bool{false, false}},
		{"one candidate, one entry", 1, []bool{true}, []bool{true}},
		{"sixteen of sixteen", MaxCandidates, make([]bool, MaxCandidates), make([]bool, MaxCandidates)},
		{"two for one", 1, []bool{true, false}, nil},
		{"four for three", 3, []bool{false, false, false, false}, nil},
		{"seventeen for sixteen", MaxCandidates, make([]bool, MaxCandidates+1), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ids := testIDs(tt.cands)
			m := &cooldownv1.AdmitRequest{Retry: tt.retry}
			for i, id := range ids {
				m.Candidates = append(m.Candidates, &cooldownv1.Connection{Id: id, Label: "c" + strings.Repeat("x", i)})
			}
			conns, err := admitConns("team-a", m)
			if tt.want == nil {
				v := fieldViolation(t, err)
				assert.Equal(t, "retry", v.GetField())
				assert.Contains(t, v.GetDescription(), "at most as many entries as candidates")
				return
			}
			require.NoError(t, err)
			require.Len(t, conns, tt.cands)
			for i, c := range conns {
				assert.Equal(t, tt.want[i], c.Retry, "candidate %d", i)
				assert.Equal(t, "team-a", c.Tenant)
				assert.Equal(t, ids[i], c.ID[:])
				assert.Equal(t, m.Candidates[i].GetLabel(), c.Label)
			}
		})
	}
}

// TestParseReportFleetFields: a report's retry and reporter reach the
// store's breaker.Report; a reporter outside [A-Za-z0-9._-]{1,64} is
// invalid_argument naming reporter, without echoing it.
func TestParseReportFleetFields(t *testing.T) {
	t.Parallel()
	id := testIDs(1)[0]
	tests := []struct {
		name     string
		retry    bool
		reporter string
		ok       bool
	}{
		{"empty reporter", false, "", true},
		{"a retry", true, "", true},
		{"uuid", false, "3f2b8c1e-7a4d-4e9b-9c0f-1d2e3f4a5b6c", true},
		{"every allowed character", true, "AZaz09._-", true},
		{"one character", false, "a", true},
		{"64 characters", false, strings.Repeat("r", MaxReporterLen), true},
		{"65 characters", false, strings.Repeat("r", MaxReporterLen+1), false},
		{"a space", false, "pod 1", false},
		{"a slash", false, "ns/pod", false},
		{"a colon", false, "host:1234", false},
		{"non-ASCII", false, "pöd", false},
		{"a newline", false, "pod\n1", false},
		{"a NUL", false, "pod\x001", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &cooldownv1.ReportRequest{
				Connection: &cooldownv1.Connection{Id: id, Label: "openai gpt-4o"}, Outcome: cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE,
				Revision: 7, RetryAfter: durationpb.New(1500 * time.Millisecond), HttpStatus: 503, ErrorCode: "unavailable",
				Retry: tt.retry, Reporter: tt.reporter,
			}
			c, rep, err := parseReport("team-a", m)
			if !tt.ok {
				v := fieldViolation(t, err)
				assert.Equal(t, "reporter", v.GetField())
				assert.Contains(t, v.GetDescription(), "[A-Za-z0-9._-]")
				assert.NotContains(t, err.Error(), tt.reporter, "the value is not echoed")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, store.Conn{Tenant: "team-a", ID: keys.ID(id), Label: "openai gpt-4o"}, c)
			assert.Equal(t, breaker.Report{
				Revision: 7, Outcome: breaker.OutcomeTransientFailure, RetryAfter: 1500, HTTPStatus: 503, ErrorCode: "unavailable",
				Retry: tt.retry, Reporter: tt.reporter,
			}, rep)
		})
	}
}

// TestAdmitProtoShadow: a decision a shadow policy allowed carries why it
// would have denied, on the answer (the chosen candidate's) and on each
// candidate's decision; an enforced one carries none.
func TestAdmitProtoShadow(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_750_000_000_000)
	ds := []store.Decision{
		{Verdict: breaker.Verdict{Decision: breaker.Deny, Reason: breaker.ReasonRetryBudget, RetryAfter: 400, Revision: 3, Phase: breaker.Closed}, Now: now},
		{Verdict: breaker.Verdict{Decision: breaker.Allow, Revision: 9, Phase: breaker.Open,
			Shadowed: breaker.ReasonCooldown, ShadowRetryAfter: 2500}, Now: now, ThrottleProbability: 0.25},
	}
	out := admitProto(1, ds)
	assert.Equal(t, uint32(1), out.GetCandidateIndex())
	assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, out.GetDecision())
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED, out.GetDenyReason(), "allowed: no deny reason")
	assert.Nil(t, out.GetRetryAfter())
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, out.GetShadowDenyReason())
	assert.Equal(t, 2500*time.Millisecond, out.GetShadowRetryAfter().AsDuration())
	assert.Equal(t, cooldownv1.State_STATE_OPEN, out.GetState())
	assert.Equal(t, 0.25, out.GetThrottleProbability(), "the chosen candidate's")
	require.Len(t, out.GetCandidates(), 2)
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET, out.GetCandidates()[0].GetDenyReason())
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED, out.GetCandidates()[0].GetShadowDenyReason())
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, out.GetCandidates()[1].GetShadowDenyReason())

	// The fleet rules' reasons on a denied answer.
	for _, r := range []breaker.DenyReason{breaker.ReasonRetryBudget, breaker.ReasonThrottled} {
		out := admitProto(0, []store.Decision{{Verdict: breaker.Verdict{Decision: breaker.Deny, Reason: r,
			RetryAfter: breaker.ThrottleRetryAfter, Phase: breaker.Closed}, Now: now}})
		assert.Equal(t, cooldownv1.DenyReason(r), out.GetDenyReason())
		assert.Equal(t, "DENY_REASON_"+strings.ToUpper(r.String()), out.GetDenyReason().String(), "the wire and breaker names agree")
		assert.Equal(t, time.Second, out.GetRetryAfter().AsDuration())
		assert.Nil(t, out.GetShadowRetryAfter())
		assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED, out.GetShadowDenyReason())
	}
}

// TestStateProtoFleet: a state's shadow mark is its policy's, and its
// fleet counts are the model's view of its stored counts at the
// snapshot's time under that policy.
func TestStateProtoFleet(t *testing.T) {
	t.Parallel()
	p := breaker.DefaultPolicy()
	p.ThrottleK, p.TripQuorum, p.FleetWindow = 2, 2, 10*time.Second
	now := int64(1_750_000_004_000) // 4 s into a 10 s bucket
	start := now - now%10_000
	st := breaker.State{Phase: breaker.Closed, Revision: 5,
		Fleet: breaker.Fleet{Start: start, PrevFirsts: 10, CurFirsts: 4, PrevRetries: 5, CurRetries: 1,
			PrevRequests: 20, CurRequests: 30, PrevAccepts: 10, CurAccepts: 6},
		Reporters: []breaker.Reporter{{ID: "old", At: now - 20_000}, {ID: "a", At: now - 3_000}, {ID: "b", At: now - 1}}}
	snap := store.Snapshot{Tenant: "t", State: st, Now: time.UnixMilli(now), Exists: true}

	got := stateProto(snap, p, false, nil)
	assert.False(t, got.GetShadow())
	f := got.GetFleet()
	require.NotNil(t, f)
	// The older bucket weighs what still overlaps the window: 60 %.
	assert.InDelta(t, 10*0.6+4, f.GetFirstAttempts(), 1e-9)
	assert.InDelta(t, 5*0.6+1, f.GetRetries(), 1e-9)
	assert.InDelta(t, 20*0.6+30, f.GetRequests(), 1e-9)
	assert.InDelta(t, 10*0.6+6, f.GetAccepts(), 1e-9)
	want := st.FleetCounts(p, now)
	assert.InDelta(t, want.ThrottleProbability, f.GetThrottleProbability(), 1e-12)
	assert.InDelta(t, (42-2*12)/(42+1.0), f.GetThrottleProbability(), 1e-9, "max(0, (requests-K*accepts)/(requests+1))")
	assert.Equal(t, uint32(2), f.GetFailureReporters(), "the reporter outside the window is not counted")

	p.Shadow = true
	assert.True(t, stateProto(snap, p, false, nil).GetShadow())

	// A connection never seen: zero counts, but the message is there.
	empty := stateProto(store.Snapshot{Now: time.UnixMilli(now)}, breaker.DefaultPolicy(), false, nil)
	require.NotNil(t, empty.GetFleet())
	assert.Zero(t, empty.GetFleet().GetRequests())
	assert.Zero(t, empty.GetFleet().GetThrottleProbability())
}

func TestReportProtoThrottle(t *testing.T) {
	t.Parallel()
	res := store.ReportResult{ReportResult: breaker.ReportResult{Accepted: true}, Revision: 4, Phase: breaker.Closed,
		Now: time.UnixMilli(1), ThrottleProbability: 0.6}
	out := reportProto(res)
	assert.Equal(t, 0.6, out.GetThrottleProbability())
	assert.True(t, out.GetAccepted())
	assert.Equal(t, uint64(4), out.GetRevision())
	assert.False(t, out.GetShadow())
	res.Shadow = true
	assert.True(t, reportProto(res).GetShadow(), "a shadow policy's report says so")
}

// TestTransitionShadowMarksPolicyDecisionsOnly: under a shadow policy a
// transition the policy computed is marked, an operator's (enforced) is not.
func TestTransitionShadowMarksPolicyDecisionsOnly(t *testing.T) {
	t.Parallel()
	for c := breaker.CauseNone; c <= breaker.CauseOverrideCleared; c++ {
		operator := c == breaker.CauseForced || c == breaker.CauseReset || c == breaker.CauseForceExpired ||
			c == breaker.CauseOverrideCleared
		tr := transitionProto(store.Transition{Event: breaker.Event{Cause: c}}, "x", true)
		assert.Equal(t, !operator, tr.GetShadow(), "%s under a shadow policy", c)
		assert.False(t, transitionProto(store.Transition{Event: breaker.Event{Cause: c}}, "x", false).GetShadow(), "%s", c)
	}
}

func TestTransitionProtoShadow(t *testing.T) {
	t.Parallel()
	tr := store.Transition{Tenant: "t", Event: breaker.Event{At: 1, From: breaker.Closed, To: breaker.Open, Cause: breaker.CauseBreaker, Revision: 2}}
	assert.True(t, transitionProto(tr, "x", true).GetShadow())
	assert.False(t, transitionProto(tr, "x", false).GetShadow())
}

// TestPolicyProtoHasEveryKnob: each knob of the table is on the wire's
// Policy under its file key, with its value (a span in milliseconds).
func TestPolicyProtoHasEveryKnob(t *testing.T) {
	t.Parallel()
	p := breaker.DefaultPolicy()
	p.ThrottleK, p.TripQuorum, p.Shadow, p.RetryBudgetMin = 2, 3, true, 9
	msg := policyProto(p).ProtoReflect()
	fields := msg.Descriptor().Fields()
	for _, k := range breaker.Knobs() {
		fd := fields.ByName(protoreflect.Name(k.Key()))
		require.NotNil(t, fd, "Policy has no field %s", k.Key())
		v := msg.Get(fd)
		var got float64
		switch fd.Kind() {
		case protoreflect.BoolKind:
			if v.Bool() {
				got = 1
			}
		case protoreflect.Uint32Kind:
			got = float64(v.Uint())
		case protoreflect.DoubleKind:
			got = v.Float()
		case protoreflect.MessageKind:
			d, ok := v.Message().Interface().(*durationpb.Duration)
			require.True(t, ok, "%s is a duration", k.Key())
			got = float64(d.AsDuration())
		default:
			t.Fatalf("%s: unexpected kind %v", k.Key(), fd.Kind())
		}
		assert.Equal(t, k.Get(p), got, k.Key())
	}
}

// counter is the value of the counter name with these labels (name=value
// pairs) in m's registry, 0 when it has no such series.
func counter(t *testing.T, m *Metrics, name string, labels ...string) float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			var got []string
			for _, l := range s.GetLabel() {
				got = append(got, l.GetName()+"="+l.GetValue())
			}
			if strings.Join(got, ",") == strings.Join(labels, ",") {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// series counts the series of a collector.
func series(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// TestShadowDenialsCounted: a shadowed decision counts under the reason
// it would have given; the admit counter sees an allow.
func TestShadowDenialsCounted(t *testing.T) {
	t.Parallel()
	m := newMetrics("", "")
	m.admit(store.Decision{Verdict: breaker.Verdict{Decision: breaker.Allow, Shadowed: breaker.ReasonThrottled}})
	m.admit(store.Decision{Verdict: breaker.Verdict{Decision: breaker.Allow, Shadowed: breaker.ReasonThrottled}})
	m.admit(store.Decision{Verdict: breaker.Verdict{Decision: breaker.Allow, Shadowed: breaker.ReasonRetryBudget}})
	m.admit(store.Decision{Verdict: breaker.Verdict{Decision: breaker.Deny, Reason: breaker.ReasonRetryBudget}})
	m.admit(store.Decision{Verdict: breaker.Verdict{Decision: breaker.Allow}})
	assert.Equal(t, 2, series(m.shadowed), "no series for an enforced or a plain decision")
	assert.Equal(t, 2.0, counter(t, m, "cooldownd_shadow_denials_total", "reason=throttled"))
	assert.Equal(t, 1.0, counter(t, m, "cooldownd_shadow_denials_total", "reason=retry_budget"))
	assert.Equal(t, 4.0, counter(t, m, "cooldownd_admits_total", "decision=allow", "reason="), "a shadowed call is an allow")
	assert.Equal(t, 1.0, counter(t, m, "cooldownd_admits_total", "decision=deny", "reason=retry_budget"))
}
