package server

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
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

func stateProto(s store.Snapshot) *cooldownv1.ConnectionState {
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

func transitionProto(t store.Transition, label string) *cooldownv1.Transition {
	return &cooldownv1.Transition{
		Connection: &cooldownv1.Connection{Id: t.ID[:], Label: label},
		Time:       ts(t.At),
		From:       cooldownv1.State(t.From),
		To:         cooldownv1.State(t.To),
		Cause:      cooldownv1.Cause(t.Cause),
		Revision:   t.Revision,
		Actor:      t.Actor,
		Reason:     t.Reason,
	}
}
