package server

import (
	"context"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/store"
)

// explainHistory is how many recent transitions an explanation reads: the
// operator of an override is the latest, a half-open connection's open
// the one before it.
const explainHistory = 4

// maxExplainReads bounds the history reads one ListConnections page (or
// one watch snapshot page) makes for its explanations; beyond it a
// connection is explained from its state alone (no operator, no opening
// cause), which says so ("an operator", "recovering").
const maxExplainReads = 32

// needsHistory says whether the explanation of st reads its recent
// transitions: an override (its operator), a half-open connection (the
// open it recovers from) and an open one (a breaker's probe failure, or
// an open that has ended and is half-open when explained).
func needsHistory(st breaker.State) bool {
	return st.Override != breaker.NoOverride || st.Phase == breaker.HalfOpen || st.Phase == breaker.Open
}

// explainer reads the recent transitions that explanations need, at most
// budget times (0: unbounded); a failed read leaves the explanation to the
// state alone: an explanation never fails a read of states.
type explainer struct {
	s      *Server
	budget int
	reads  int
}

func (s *Server) explainer(budget int) *explainer { return &explainer{s: s, budget: budget} }

// recent returns snap's recent transitions when its explanation needs them.
func (x *explainer) recent(ctx context.Context, snap store.Snapshot) []breaker.Event {
	if !snap.Exists || !needsHistory(snap.State) || (x.budget > 0 && x.reads >= x.budget) {
		return nil
	}
	x.reads++
	_, hist, err := x.s.store.Get(ctx, snap.Tenant, snap.ID, explainHistory)
	if err != nil {
		return nil
	}
	return events(hist)
}

// state is snap's wire state with its explanation.
func (x *explainer) state(ctx context.Context, snap store.Snapshot, p breaker.Policy, withTenant bool) *cooldownv1.ConnectionState {
	return stateProto(snap, p, withTenant, x.recent(ctx, snap))
}

func events(hist []store.Transition) []breaker.Event {
	out := make([]breaker.Event, len(hist))
	for i, t := range hist {
		out[i] = t.Event
	}
	return out
}

// explanationProto is an explanation on the wire.
func explanationProto(e breaker.Explanation) *cooldownv1.Explanation {
	out := &cooldownv1.Explanation{
		Reasons:             e.Reasons,
		Severity:            uint32(e.Severity),
		Tripped:             cooldownv1.TripRule(e.Tripped),
		FailuresToTrip:      uint32(e.FailuresToTrip),
		ThrottleProbability: e.ThrottleProbability,
		Throttling:          e.Throttling,
		QuorumReporters:     uint32(e.QuorumReporters),
		QuorumNeeded:        uint32(e.QuorumNeeded),
		OpenedBy:            cooldownv1.Cause(e.OpenedBy),
		Actor:               e.Actor,
		Reason:              e.Reason,
		Denies:              cooldownv1.DenyReason(e.Denies),
	}
	for _, r := range e.Rules {
		out.TripRules = append(out.TripRules, &cooldownv1.TripRuleState{
			Rule: cooldownv1.TripRule(r.Rule), Value: r.Value, Threshold: r.Threshold, Calls: r.Calls,
			MinCalls: uint32(r.MinCalls), FailuresToTrip: uint32(r.FailuresToTrip),
		})
	}
	if b := e.Budget; b != nil {
		out.RetryBudget = &cooldownv1.RetryBudget{Retries: b.Retries, Allowed: b.Allowed, RetriesLeft: uint32(b.Left)}
	}
	return out
}
