package store

import (
	"context"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// Coalesced is the successes a cooldownd replica merged for one
// connection over its coalescing interval (internal/server's coalescer,
// decision 0054): reports of SUCCESS with no lease token and no hint, all
// at one revision and with one retry flag. Applied by
// [Store.ReportCoalesced] as one report of their sum.
type Coalesced struct {
	// Revision is the revision every report carried.
	Revision uint64
	// Retry is every report's retry flag (a first attempt counts toward
	// the fleet retry budget's base, a retry does not, so they are two
	// batches).
	Retry bool
	// Count is the sum of the counts of the reports without an
	// idempotency key.
	Count int64
	// Keyed are the reports with an idempotency key, each counted only if
	// its key was not remembered already.
	Keyed []KeyedCount
	// HTTPStatus and ErrorCode are the last report's, as applying the
	// reports one by one would leave them.
	HTTPStatus int
	ErrorCode  string
	// Throttle is the throttle probability the replica answered the
	// reports with (remembered with each key, for a resend's answer).
	Throttle float64
}

// KeyedCount is one coalesced report with an idempotency key.
type KeyedCount struct {
	Key   string
	Count int64 // at least 1
}

// CoalescedResult is what [Store.ReportCoalesced] applied.
type CoalescedResult struct {
	ReportResult
	// Applied is the count reported: Count and the counts of the keys this
	// call claimed. 0: nothing was reported (every key was remembered
	// already), and ReportResult is zero.
	Applied int64
	// Replayed are the keys remembered for the same report already (a
	// resend applied by another replica or by a full Report), Reused
	// those remembered for a report that said something else (a client
	// bug): neither is counted.
	Replayed, Reused int
}

// ReportCoalesced applies b as one report of SUCCESS of the sum of its
// counts, as [Store.Report] would apply them one by one at the same
// instant (internal/breaker counts a success of count n as n successes).
// With keyed reports it is one script (lua/claims_open.lua, decision
// 0063): it claims each idempotency key, remembering it as a report
// applied with the answer the replica gave, then reports the unkeyed
// count and the claimed ones; a key already remembered is not counted
// again, whichever replica or call applied it first. A run refused for a
// connection not yet registered gives its claims back before the
// registration and the next run. An error says the batch may be lost
// (never counted twice).
func (s *Store) ReportCoalesced(ctx context.Context, c Conn, b Coalesced) (CoalescedResult, error) {
	rep := breaker.Report{Revision: b.Revision, Outcome: breaker.OutcomeSuccess, HTTPStatus: b.HTTPStatus, ErrorCode: b.ErrorCode,
		Count: b.Count, Retry: b.Retry}
	c = Conn{Tenant: c.Tenant, ID: c.ID, Label: c.Label}
	if len(b.Keyed) == 0 {
		if b.Count <= 0 {
			return CoalescedResult{}, nil
		}
		res, err := s.Report(ctx, c, rep)
		if err != nil {
			return CoalescedResult{}, err
		}
		return CoalescedResult{ReportResult: res, Applied: b.Count}, nil
	}
	res, claimed, err := s.report(ctx, c, rep, &claims{keys: b.Keyed, throttle: b.Throttle})
	if err != nil {
		return CoalescedResult{}, err // typed by report, as Report's
	}
	out := CoalescedResult{ReportResult: res}
	n := max(b.Count, 0)
	for i, x := range claimed {
		switch x {
		case 1:
			n += max(b.Keyed[i].Count, 1)
		case 0:
			out.Replayed++
		default:
			out.Reused++
		}
	}
	if !res.Now.IsZero() {
		out.Applied = n
	}
	return out, nil
}
