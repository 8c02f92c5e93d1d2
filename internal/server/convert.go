package server

import (
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

func ts(ms int64) *timestamppb.Timestamp {
	if ms <= 0 {
		return nil
	}
	return timestamppb.New(time.UnixMilli(ms))
}

func dur(ms int64) *durationpb.Duration {
	if ms <= 0 {
		return nil
	}
	return durationpb.New(time.Duration(ms) * time.Millisecond)
}

// stateProto is a connection's wire state under its policy p (for the
// shadow mark, the fleet counts and the explanation, which are read
// through it); withTenant names its tenant (for callers that may see
// several); recent are its latest transitions, newest first, for the
// explanation (nil when not read: see needsHistory).
func stateProto(s store.Snapshot, p breaker.Policy, withTenant bool, recent []breaker.Event) *cooldownv1.ConnectionState {
	st := s.State
	now := s.Now.UnixMilli()
	phase := st.Phase
	if phase == 0 {
		phase = breaker.Closed
	}
	out := &cooldownv1.ConnectionState{
		Connection:          &cooldownv1.Connection{Id: s.ID[:], Label: s.Label},
		State:               cooldownv1.State(phase),
		Cause:               cooldownv1.Cause(st.Cause),
		Revision:            st.Revision,
		ProbesInFlight:      uint32(len(st.Leases)),
		ConsecutiveFailures: uint32(st.Consecutive),
		Reopens:             uint32(st.Reopens),
		RecentSuccesses:     uint64(st.Successes),
		RecentFailures:      uint64(st.Failures),
		LastHttpStatus:      uint32(st.LastStatus),
		LastOutcome:         cooldownv1.Outcome(st.LastOutcome),
		LastErrorCode:       st.LastErrorCode,
		Override:            cooldownv1.Override(st.Override),
		OverrideUntil:       ts(st.OverrideUntil),
		ChangedAt:           ts(st.ChangedAt),
		UpdatedAt:           ts(st.UpdatedAt),
		Shadow:              p.Shadow,
		Fleet:               fleetProto(st.FleetCounts(p, now)),
		Explanation:         explanationProto(st.Explain(p, now, recent)),
	}
	if withTenant {
		out.Tenant = s.Tenant
	}
	if phase == breaker.Open {
		out.OpenUntil = ts(st.OpenUntil)
		out.RetryAfter = dur(st.OpenUntil - now)
	}
	var oldest int64
	for _, l := range st.Leases {
		if oldest == 0 || l.Granted < oldest {
			oldest = l.Granted
		}
	}
	out.ProbeStartedAt = ts(oldest)
	return out
}

// admitProto is Admit's answer: the decision of candidate idx, and every
// examined candidate's (ds, up to the chosen one).
func admitProto(idx int, ds []store.Decision) *cooldownv1.AdmitResponse {
	out := &cooldownv1.AdmitResponse{CandidateIndex: uint32(idx)}
	for _, d := range ds {
		out.Candidates = append(out.Candidates, &cooldownv1.CandidateDecision{
			Decision: cooldownv1.Decision(d.Decision), DenyReason: cooldownv1.DenyReason(d.Reason),
			RetryAfter: dur(d.RetryAfter), State: cooldownv1.State(d.Phase), Revision: d.Revision,
			ShadowDenyReason: cooldownv1.DenyReason(d.Shadowed),
		})
	}
	d := ds[idx]
	out.Decision = cooldownv1.Decision(d.Decision)
	out.Revision = d.Revision
	out.State = cooldownv1.State(d.Phase)
	out.ServerTime = timestamppb.New(d.Now)
	out.ThrottleProbability = d.ThrottleProbability
	out.Durability = cooldownv1.Durability(d.Durability) // store.Replication's values are the enum's
	if d.Shadowed != breaker.ReasonNone {
		out.ShadowDenyReason = cooldownv1.DenyReason(d.Shadowed)
		out.ShadowRetryAfter = dur(d.ShadowRetryAfter)
	}
	switch d.Decision {
	case breaker.Deny:
		out.DenyReason = cooldownv1.DenyReason(d.Reason)
		out.RetryAfter = dur(d.RetryAfter)
		out.AvailableAt = timestamppb.New(d.Now.Add(time.Duration(d.RetryAfter) * time.Millisecond))
	case breaker.AllowProbe:
		out.LeaseToken = d.LeaseToken
		out.LeaseExpiresAt = timestamppb.New(d.LeaseExpires)
	}
	return out
}

// reportProto is Report's answer.
func reportProto(res store.ReportResult) *cooldownv1.ReportResponse {
	return &cooldownv1.ReportResponse{
		State: cooldownv1.State(res.Phase), Revision: res.Revision, Accepted: res.Accepted, Changed: res.Changed,
		ServerTime: timestamppb.New(res.Now), ThrottleProbability: res.ThrottleProbability, Shadow: res.Shadow,
		Durability: cooldownv1.Durability(res.Durability), // store.Replication's values are the enum's
	}
}

// fleetProto is what the fleet rules see of a connection.
func fleetProto(c breaker.FleetCounts) *cooldownv1.FleetCounts {
	return &cooldownv1.FleetCounts{
		FirstAttempts:       c.FirstAttempts,
		Retries:             c.Retries,
		Requests:            c.Requests,
		Accepts:             c.Accepts,
		ThrottleProbability: c.ThrottleProbability,
		FailureReporters:    uint32(c.FailureReporters),
	}
}

// transitionProto is one state change on the wire; shadow says the
// connection's policy is in shadow mode, which marks the change as computed,
// not enforced, when it is the policy's decision (an operator's is always
// enforced). A history entry is marked by the policy in effect when it is
// read: the policy is the server's configuration, not stored with it.
func transitionProto(t store.Transition, label string, shadow bool) *cooldownv1.Transition {
	switch t.Cause {
	case breaker.CauseForced, breaker.CauseReset, breaker.CauseForceExpired, breaker.CauseOverrideCleared:
		shadow = false
	}
	return &cooldownv1.Transition{
		Connection: &cooldownv1.Connection{Id: t.ID[:], Label: label},
		Time:       ts(t.At),
		From:       cooldownv1.State(t.From),
		To:         cooldownv1.State(t.To),
		Cause:      cooldownv1.Cause(t.Cause),
		Revision:   t.Revision,
		Actor:      t.Actor,
		Reason:     t.Reason,
		Shadow:     shadow,
	}
}

// policyProto is a breaker policy on the wire: each knob of the table
// (breaker.Knobs) is the Policy field named by its key (TestPolicyProto
// CoversEveryKnob holds that every knob has one, of its kind), so a knob
// added to the table needs only its proto field. A zero duration is unset
// (its rule is off).
func policyProto(p breaker.Policy) *cooldownv1.Policy {
	out := &cooldownv1.Policy{}
	m := out.ProtoReflect()
	fields := m.Descriptor().Fields()
	for _, k := range breaker.Knobs() {
		f := fields.ByName(protoreflect.Name(k.Key()))
		if f == nil {
			continue
		}
		v := k.Get(p)
		switch k.Kind {
		case breaker.Span:
			if d := dur(time.Duration(v).Milliseconds()); d != nil {
				m.Set(f, protoreflect.ValueOfMessage(d.ProtoReflect()))
			}
		case breaker.Count:
			m.Set(f, protoreflect.ValueOfUint32(uint32(v)))
		case breaker.Ratio:
			m.Set(f, protoreflect.ValueOfFloat64(v))
		case breaker.Switch:
			m.Set(f, protoreflect.ValueOfBool(v != 0))
		}
	}
	return out
}

// ShortID is the form of a connection id that people see (keys.ID.Short).
func ShortID(id keys.ID) string { return id.Short() }

// human rounds a duration for people: 950ms, 1.5s, 4m10s, 2h5m, 720h.
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		d = d.Round(time.Second)
	default:
		d = d.Round(time.Minute)
	}
	s := d.String()
	for _, zero := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, zero) {
			s = s[:len(s)-2]
		}
	}
	return s
}
