package breaker

import "slices"

// Fleet is a connection's traffic counts over Policy.FleetWindow, from
// every process's calls: the fleet rules' inputs (retry budget, adaptive
// throttle). Like Window it is two aligned buckets, the previous one
// weighted by how much of it still overlaps. A count is kept only while
// the rule that reads it is on, and transitions leave the counts alone:
// they describe the traffic, not the breaker.
type Fleet struct {
	Start int64 // start of the current bucket (Unix ms), 0 when empty
	// First attempts reported (Report with Retry false): the budget's base.
	PrevFirsts, CurFirsts int64
	// Retries admitted: what the budget spends.
	PrevRetries, CurRetries int64
	// Requests: calls reported and calls the throttle rejected.
	PrevRequests, CurRequests int64
	// Accepts: calls reported as a success or a client error.
	PrevAccepts, CurAccepts int64
}

// Reporter is one process that reported an ambiguous failure while
// closed, and when it last did: the trip quorum's memory.
type Reporter struct {
	ID string
	At int64 // Unix ms
}

// Attempt describes the call an Admit is for.
type Attempt struct {
	// Nonce is random, from the caller: a probe lease's token is built
	// from it.
	Nonce string
	// Retry says the call was already sent to this connection: a retry,
	// charged to the fleet retry budget.
	Retry bool
	// Draw is uniform in [0, 1), from the caller: the adaptive throttle
	// rejects the call when its rejection probability is above it.
	Draw float64
}

// weighted is a count pair of a two-bucket sliding window (Window's,
// Fleet's) in count·ms: the previous bucket's count times its overlap plus
// the current count times the window (exact integers, below 2^53).
func weighted(prev, cur, w, e int64) int64 { return prev*(w-e) + cur*w }

// fleetAt is the fleet counts as of now, rotated without writing: the
// view a decision reads.
func (s *State) fleetAt(p Policy, now int64) Fleet {
	w := ms(p.FleetWindow)
	start := now - now%w
	f := s.Fleet
	switch f.Start {
	case start:
	case start - w:
		f = Fleet{Start: start, PrevFirsts: f.CurFirsts, PrevRetries: f.CurRetries,
			PrevRequests: f.CurRequests, PrevAccepts: f.CurAccepts}
	default:
		f = Fleet{Start: start}
	}
	return f
}

// ThrottleProbability is the adaptive throttle's rejection probability at
// now, max(0, (requests − K·accepts) / (requests + 1)) over the fleet
// window (in weighted units: one request weighs the window), 0 when the
// throttle is off.
func (s *State) ThrottleProbability(p Policy, now int64) float64 {
	if p.ThrottleK <= 0 {
		return 0
	}
	f, w := s.fleetAt(p, now), ms(p.FleetWindow)
	e := now - f.Start
	rq, ac := weighted(f.PrevRequests, f.CurRequests, w, e), weighted(f.PrevAccepts, f.CurAccepts, w, e)
	// The explicit conversion rounds the product on its own (no fused
	// multiply-add), as the scripts compute it.
	return max(0, (float64(rq)-float64(p.ThrottleK*float64(ac)))/float64(rq+w))
}

// budgetAllows says whether one more retry fits the fleet retry budget:
// the retries over the window, this one included, within the larger of
// RetryBudget × first attempts and RetryBudgetMin per second, in exact
// integer arithmetic (every product stays below 2^53).
func (s *State) budgetAllows(p Policy, now int64) bool {
	bp := p.RetryBudgetBasisPoints()
	if bp <= 0 {
		return true
	}
	f, w := s.fleetAt(p, now), ms(p.FleetWindow)
	e := now - f.Start
	retries := weighted(f.PrevRetries, f.CurRetries, w, e) + w
	firsts := weighted(f.PrevFirsts, f.CurFirsts, w, e)
	return retries*10000 <= max(int64(p.RetryBudgetMin)*w*w*10, bp*firsts)
}

// countFleet adds to the current bucket's counts (rotating it first).
func (s *State) countFleet(p Policy, now int64, add func(f *Fleet)) {
	s.Fleet = s.fleetAt(p, now)
	add(&s.Fleet)
	f := &s.Fleet
	f.CurFirsts, f.CurRetries = min(f.CurFirsts, MaxCount), min(f.CurRetries, MaxCount)
	f.CurRequests, f.CurAccepts = min(f.CurRequests, MaxCount), min(f.CurAccepts, MaxCount)
}

// countReport counts a reported call in the fleet's counts, for the rules
// that are on: a first attempt for the budget, a request (and an accept
// for a success or a client error) for the throttle.
func (s *State) countReport(p Policy, now int64, r Report) {
	firsts := p.RetryBudgetBasisPoints() > 0 && !r.Retry
	throttle := p.ThrottleK > 0
	if r.Outcome == OutcomeCanceled || (!firsts && !throttle) {
		return
	}
	n := int64(1)
	if r.Outcome == OutcomeSuccess {
		n = max(r.Count, 1)
	}
	s.countFleet(p, now, func(f *Fleet) {
		if firsts {
			f.CurFirsts += n
		}
		if throttle {
			f.CurRequests += n
			if r.Outcome == OutcomeSuccess || r.Outcome == OutcomeClientError {
				f.CurAccepts += n
			}
		}
	})
}

// FailureReporters is how many distinct reporters saw an ambiguous
// failure within the fleet window before now.
func (s *State) FailureReporters(p Policy, now int64) int {
	n := 0
	for _, r := range s.Reporters {
		if r.At > now-ms(p.FleetWindow) {
			n++
		}
	}
	return n
}

// sawFailure records that reporter id saw an ambiguous failure at now:
// reporters outside the window are forgotten, id moves to the end (the
// list is oldest first), and only the TripQuorum latest are kept.
func (s *State) sawFailure(p Policy, now int64, id string) {
	if p.TripQuorum <= 1 {
		return
	}
	cut := now - ms(p.FleetWindow)
	rs := slices.DeleteFunc(slices.Clone(s.Reporters), func(r Reporter) bool { return r.At <= cut || r.ID == id })
	rs = append(rs, Reporter{ID: id, At: now})
	if len(rs) > p.TripQuorum {
		rs = rs[len(rs)-p.TripQuorum:]
	}
	s.Reporters = rs
}

// quorate says whether enough distinct reporters saw ambiguous failures
// for them to trip the breaker.
func (s *State) quorate(p Policy, now int64) bool {
	return p.TripQuorum <= 1 || s.FailureReporters(p, now) >= p.TripQuorum
}

// FleetCounts is what the fleet rules see at now, for display: each
// count over the window (the older bucket weighted by its overlap, in
// calls), the throttle's rejection probability and the trip quorum's
// distinct reporters.
type FleetCounts struct {
	FirstAttempts, Retries, Requests, Accepts float64
	ThrottleProbability                       float64
	FailureReporters                          int
}

// FleetCounts returns the fleet rules' view of s at now under p.
func (s *State) FleetCounts(p Policy, now int64) FleetCounts {
	c := FleetCounts{ThrottleProbability: s.ThrottleProbability(p, now), FailureReporters: s.FailureReporters(p, now)}
	w := ms(p.FleetWindow)
	if w <= 0 {
		return c
	}
	f := s.fleetAt(p, now)
	e := now - f.Start
	calls := func(prev, cur int64) float64 { return float64(weighted(prev, cur, w, e)) / float64(w) }
	c.FirstAttempts, c.Retries = calls(f.PrevFirsts, f.CurFirsts), calls(f.PrevRetries, f.CurRetries)
	c.Requests, c.Accepts = calls(f.PrevRequests, f.CurRequests), calls(f.PrevAccepts, f.CurAccepts)
	return c
}
