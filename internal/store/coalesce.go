package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// scriptClaim claims a coalesced batch's idempotency keys
// (lua/coalesce_claim.lua).
var scriptClaim = newScript(once, "lua/coalesce_claim.lua")

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
// The keyed reports' idempotency keys are claimed first, in one script
// (lua/coalesce_claim.lua) that remembers each as a report applied with
// the answer the replica gave; a key already remembered is not counted
// again, whichever replica or call applied it first. Then the unkeyed
// count and the claimed ones are reported, without a key, in one
// [Store.Report]. Between the two a failure loses the claimed successes
// (never counts them twice): an error says the batch may be lost.
func (s *Store) ReportCoalesced(ctx context.Context, c Conn, b Coalesced) (CoalescedResult, error) {
	var out CoalescedResult
	n := b.Count
	if len(b.Keyed) > 0 {
		l := c.layout()
		ks := make([]string, len(b.Keyed))
		args := make([]any, 0, 5+len(b.Keyed))
		args = append(args, s.reportKeyTTL, s.nowArg(), b.Revision, flag(b.Retry), strconv.FormatFloat(b.Throttle, 'g', 17, 64))
		for i, k := range b.Keyed {
			ks[i] = l.Report(k.Key)
			args = append(args, max(k.Count, 1))
		}
		v, err := scriptClaim.run(ctx, s.rdb, ks, args...).Result()
		if err != nil {
			return CoalescedResult{}, unavailable("coalesced report", err)
		}
		claimed, ok := v.([]any)
		if !ok || len(claimed) != len(b.Keyed) {
			return CoalescedResult{}, unavailable("coalesced report", fmt.Errorf("store: claim reply %v, want %d values", v, len(b.Keyed)))
		}
		for i, x := range claimed {
			switch x {
			case int64(1):
				n += max(b.Keyed[i].Count, 1)
			case int64(0):
				out.Replayed++
			default:
				out.Reused++
			}
		}
	}
	if n <= 0 {
		return out, nil
	}
	res, err := s.Report(ctx, Conn{Tenant: c.Tenant, ID: c.ID, Label: c.Label}, breaker.Report{
		Revision: b.Revision, Outcome: breaker.OutcomeSuccess, HTTPStatus: b.HTTPStatus, ErrorCode: b.ErrorCode,
		Count: n, Retry: b.Retry,
	})
	if err != nil {
		return CoalescedResult{}, err
	}
	out.ReportResult, out.Applied = res, n
	return out, nil
}
