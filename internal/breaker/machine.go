package breaker

// Admit decides whether one call may go now. On AllowProbe it grants a
// lease whose token is built from a.Nonce. The fleet rules may deny a call
// the breaker would admit: while closed the adaptive throttle (a.Draw),
// then, for a retry, closed or half-open, the retry budget. A policy in
// shadow mode allows what it would deny and says why in Verdict.Shadowed;
// operator overrides are enforced whatever the policy.
func (s *State) Admit(p Policy, now int64, a Attempt) (Verdict, []Event) {
	evs := s.Settle(now)
	v := Verdict{Revision: s.Revision, Phase: s.phase()}
	switch {
	case s.Override == ForcedOpen:
		v.Decision, v.Reason = Deny, ReasonForcedOpen
		v.RetryAfter = ms(p.OpenMax)
		if s.OverrideUntil > 0 {
			v.RetryAfter = s.OverrideUntil - now
		}
		return v, evs
	case s.Override == ForcedClosed:
		v.Decision = Allow
		return v, evs
	case s.phase() == Closed:
		v.Decision = Allow
		s.fleetRules(p, now, a, &v)
	case s.phase() == Open:
		v.Decision, v.Reason, v.RetryAfter = Deny, ReasonFor(s.Cause), s.OpenUntil-now
	case len(s.Leases) >= p.MaxProbes: // half-open, every probe out
		v.Decision, v.Reason = Deny, ReasonProbeInFlight
		v.RetryAfter = s.Leases[0].Expires - now
		for _, l := range s.Leases[1:] {
			v.RetryAfter = min(v.RetryAfter, l.Expires-now)
		}
	default: // half-open
		v.Decision = AllowProbe
		if s.fleetRules(p, now, a, &v); v.Decision == AllowProbe {
			slot := s.freeSlot()
			l := Lease{Slot: slot, Granted: now, Expires: now + ms(p.LeaseTTL)}
			l.Token = LeaseToken(s.Revision, slot, now, a.Nonce)
			s.Leases = append(s.Leases, l)
			v.Lease = &l
		}
	}
	if v.Decision == Deny && p.Shadow {
		v.Shadowed, v.ShadowRetryAfter = v.Reason, v.RetryAfter
		v.Decision, v.Reason, v.RetryAfter = Allow, ReasonNone, 0
	}
	// An Admit never creates a state: a connection never reported nor
	// forced counts nothing here.
	switch {
	case !s.seen():
	case v.Decision == Deny && v.Reason == ReasonThrottled:
		// A rejected call is one of the throttle's requests (an allowed
		// one counts when it is reported).
		s.countFleet(p, now, func(f *Fleet) { f.CurRequests++ })
	case a.Retry && v.Decision != Deny && p.RetryBudgetBasisPoints() > 0:
		s.countFleet(p, now, func(f *Fleet) { f.CurRetries++ })
	}
	return v, evs
}

// seen says whether the connection has a state: it was reported on, or
// changed (forced) at least once.
func (s *State) seen() bool { return s.Revision > 0 || s.UpdatedAt > 0 }

// ThrottleRetryAfter is the wait a throttled call is told (ms): short, as
// the throttle rejects a share of calls rather than closing the connection.
const ThrottleRetryAfter = 1000

// fleetRules denies a call the breaker admits when a fleet rule says so:
// while closed the throttle, then for a retry the retry budget (its wait
// is at most until the budget's current bucket ends).
func (s *State) fleetRules(p Policy, now int64, a Attempt, v *Verdict) {
	switch {
	case s.phase() == Closed && a.Draw < s.ThrottleProbability(p, now):
		v.Decision, v.Reason, v.RetryAfter = Deny, ReasonThrottled, ThrottleRetryAfter
	case a.Retry && !s.budgetAllows(p, now):
		w := ms(p.FleetWindow)
		v.Decision, v.Reason, v.RetryAfter = Deny, ReasonRetryBudget, w-now%w
	}
}

func (s *State) freeSlot() int {
	for slot := 0; ; slot++ {
		used := false
		for _, l := range s.Leases {
			used = used || l.Slot == slot
		}
		if !used {
			return slot
		}
	}
}

func (s *State) lease(token string) int {
	if token == "" {
		return -1
	}
	for i, l := range s.Leases {
		if l.Token == token {
			return i
		}
	}
	return -1
}

func (s *State) release(i int) {
	if i >= 0 {
		s.Leases = append(s.Leases[:i:i], s.Leases[i+1:]...)
	}
}

// ExtendLease moves a live lease's expiry to now+ttl.
// May return [ErrLeaseNotHeld].
func (s *State) ExtendLease(now int64, token string, ttl int64) (Lease, []Event, error) {
	evs := s.Settle(now)
	i := s.lease(token)
	if i < 0 {
		return Lease{}, evs, ErrLeaseNotHeld
	}
	s.Leases[i].Expires = now + ttl
	return s.Leases[i], evs, nil
}

// Report applies the outcome of one call. jitter in [0, 1) spreads a
// breaker open's duration.
func (s *State) Report(p Policy, now int64, r Report, jitter float64) (ReportResult, []Event) {
	evs := s.Settle(now)
	s.UpdatedAt = now
	s.LastStatus, s.LastOutcome, s.LastErrorCode = r.HTTPStatus, r.Outcome, r.ErrorCode
	li := s.lease(r.LeaseToken)
	// A half-open connection's verdict belongs to its probes: only a live
	// lease carries it. A probe that gave up its lease (CANCELED, or it
	// lapsed) holds the current revision still, but its late report must
	// not decide over the probe granted after it.
	res := ReportResult{Accepted: li >= 0 || (r.Revision == s.Revision && s.phase() != HalfOpen)}
	s.release(li)
	s.countReport(p, now, r)
	if r.Outcome == OutcomeCanceled || s.Override != NoOverride {
		return res, evs
	}
	before := len(evs)
	if res.Accepted {
		evs = s.verdict(p, now, r, jitter, evs)
	}
	if d, cause := hint(p, r); d > 0 {
		evs = s.cool(now, now+d, cause, evs)
	}
	res.Changed = len(evs) > before
	return res, evs
}

// verdict applies a live report's outcome to the breaker. An ambiguous
// failure trips a closed breaker only with the trip quorum; a half-open
// probe's failure re-opens it whoever reported it (the probe is the
// fleet's one test).
func (s *State) verdict(p Policy, now int64, r Report, jitter float64, evs []Event) []Event {
	o, n := r.Outcome, max(r.Count, 1)
	switch o {
	case OutcomeSuccess, OutcomeClientError:
		switch s.phase() {
		case HalfOpen:
			s.Reopens = 0
			s.resetCounts()
			return append(evs, s.transition(now, Closed, CauseProbeSuccess, "", ""))
		case Closed:
			if o == OutcomeSuccess {
				s.Successes = min(s.Successes+n, MaxCount)
				s.Consecutive = 0
				s.count(p, now, false, n)
			}
		}
	case OutcomeTransientFailure:
		switch s.phase() {
		case HalfOpen:
			return append(evs, s.trip(p, now, jitter))
		case Closed:
			s.Failures = min(s.Failures+1, MaxCount)
			s.Consecutive = min(s.Consecutive+1, MaxCount)
			s.count(p, now, true, 1)
			s.sawFailure(p, now, r.Reporter)
			if ((p.ConsecutiveFailures > 0 && s.Consecutive >= p.ConsecutiveFailures) || s.rateTripped(p, now)) &&
				s.quorate(p, now) {
				return append(evs, s.trip(p, now, jitter))
			}
		}
	}
	return evs
}

// trip opens the breaker for the next exponential duration.
func (s *State) trip(p Policy, now int64, jitter float64) Event {
	s.Reopens = min(s.Reopens+1, MaxReopens)
	s.resetCounts()
	ev := s.transition(now, Open, CauseBreaker, "", "")
	s.OpenUntil = now + p.openDuration(s.Reopens, jitter)
	return ev
}

// hint is the cooldown a report asks for whatever its revision: the
// server's delay, merged with the policy's block for its outcome.
func hint(p Policy, r Report) (int64, Cause) {
	switch r.Outcome {
	case OutcomeRateLimited:
		if r.RetryAfter > 0 {
			return r.RetryAfter, CauseRateLimit
		}
		return ms(p.RateLimitCooldown), CauseRateLimit
	case OutcomeOverloaded:
		return max(r.RetryAfter, ms(p.OverloadFloor)), CauseOverload
	case OutcomeQuotaExhausted:
		return max(r.RetryAfter, ms(p.QuotaBlock)), CauseQuota
	case OutcomeAuthFailure:
		return max(r.RetryAfter, ms(p.AuthBlock)), CauseAuth
	}
	return r.RetryAfter, CauseRateLimit
}

// cool opens the connection until at least until, merging by max: an
// existing longer open is never shortened.
func (s *State) cool(now, until int64, cause Cause, evs []Event) []Event {
	if s.phase() == Open && s.OpenUntil >= until {
		return evs
	}
	ev := s.transition(now, Open, cause, "", "")
	s.OpenUntil = until
	return append(evs, ev)
}

// count adds one call to the sliding window.
func (s *State) count(p Policy, now int64, failed bool, n int64) {
	if p.FailureRate <= 0 {
		return
	}
	s.rotate(p, now)
	s.Window.CurCalls = min(s.Window.CurCalls+n, MaxCount)
	if failed {
		s.Window.CurFails = min(s.Window.CurFails+1, MaxCount)
	}
}

func (s *State) rotate(p Policy, now int64) {
	w := ms(p.Window)
	start := now - now%w
	switch s.Window.Start {
	case start:
	case start - w:
		s.Window = Window{Start: start, PrevCalls: s.Window.CurCalls, PrevFails: s.Window.CurFails}
	default:
		s.Window = Window{Start: start}
	}
}

// rateTripped reports whether the failure-rate rule trips, in exact integer
// arithmetic (every product stays below 2^53).
func (s *State) rateTripped(p Policy, now int64) bool {
	bp := p.RateBasisPoints()
	if bp <= 0 {
		return false
	}
	w := ms(p.Window)
	e := now - s.Window.Start
	callsW := weighted(s.Window.PrevCalls, s.Window.CurCalls, w, e)
	failsW := weighted(s.Window.PrevFails, s.Window.CurFails, w, e)
	return callsW >= int64(p.MinCalls)*w && failsW*10000 >= bp*callsW
}

// Force sets an operator override until untilMs (0: until changed).
// NoOverride clears an override and closes the connection; with no
// override (once settled) it changes nothing.
func (s *State) Force(now int64, o Override, untilMs int64, actor, reason string) []Event {
	evs := s.Settle(now)
	if o == NoOverride && s.Override == NoOverride {
		return evs
	}
	s.Override, s.OverrideUntil = o, untilMs
	switch o {
	case ForcedOpen:
		ev := s.transition(now, Open, CauseForced, actor, reason)
		s.OpenUntil = untilMs
		return append(evs, ev)
	case ForcedClosed:
		s.resetCounts()
		return append(evs, s.transition(now, Closed, CauseForced, actor, reason))
	}
	s.OverrideUntil = 0
	s.resetCounts()
	return append(evs, s.transition(now, Closed, CauseOverrideCleared, actor, reason))
}

// Reset clears the connection back to closed, keeping the revision
// increasing so that reports from before the reset stay stale.
func (s *State) Reset(now int64, actor, reason string) []Event {
	evs := s.Settle(now)
	s.Override, s.OverrideUntil, s.Reopens = NoOverride, 0, 0
	s.resetCounts()
	return append(evs, s.transition(now, Closed, CauseReset, actor, reason))
}
