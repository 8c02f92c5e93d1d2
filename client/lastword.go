package client

import (
	"time"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// lastWord is cooldownd's last denial of a connection as this process
// heard it: until when, and why. The in-process fallback honours it, so
// that a call cooldownd did not answer in time is never let through to a
// connection the fleet was told to leave alone — a primary skipped for
// its fallback, a cooldown from a Retry-After, an open breaker.
//
// A denial of every call (until) and one of retries only (retryUntil: the
// fleet's retry budget was spent) are kept apart: a spent budget says
// nothing against first attempts. A throttled call leaves no word: the
// throttle rejects a share of calls at random, it is not a wait for the
// connection, so the fallback does not deny every call for its retry-after
// (the local breaker's own throttle applies to this process's calls).
type lastWord struct {
	until      int64 // Unix ms: every call is denied before it
	reason     DenyReason
	retryUntil int64 // Unix ms: retries are denied before it (ReasonRetryBudget)
}

// learn records what cooldownd said of each candidate it examined:
//   - a denial with a wait holds until it runs out;
//   - a retry-budget denial holds for retries only, until its wait runs
//     out; like a throttled call, it says the breaker would admit the call,
//     so an earlier denial of every call is spent;
//   - an admission clears the word (of a retry: the retry word too, the
//     budget had room).
func (l *local) learn(now time.Time, m *cooldownv1.AdmitResponse, cands []Conn, retry []bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	nowMs := now.UnixMilli()
	for i, d := range m.GetCandidates() {
		if i >= len(cands) {
			break
		}
		id := cands[i].id
		w, had := l.words[id]
		switch reason := DenyReason(d.GetDenyReason()); {
		case Decision(d.GetDecision()) == DecisionAllow, Decision(d.GetDecision()) == DecisionAllowProbe:
			if isRetry(retry, i) {
				w.retryUntil = 0
			}
			w.until, w.reason = 0, ReasonNone
		case Decision(d.GetDecision()) != DecisionDeny:
			continue
		case reason == ReasonThrottled:
			w.until, w.reason = 0, ReasonNone
		case reason == ReasonRetryBudget:
			w.until, w.reason = 0, ReasonNone
			w.retryUntil = max(w.retryUntil, nowMs+d.GetRetryAfter().AsDuration().Milliseconds())
		default:
			if wait := d.GetRetryAfter().AsDuration(); wait > 0 {
				l.hear(id, lastWord{until: nowMs + wait.Milliseconds(), reason: reason})
			}
			continue
		}
		switch {
		case w.until <= nowMs && w.retryUntil <= nowMs:
			delete(l.words, id)
		case had:
			l.words[id] = w
		default:
			l.hear(id, w)
		}
	}
}

// heard records that this process told cooldownd of a delay (a
// Retry-After, a quota or auth failure, a proactive cooldown) that left
// the connection open: until it runs out the fallback denies it too.
func (l *local) heard(now time.Time, c Conn, cl Classification) {
	delay := reportDelay(cl)
	if delay <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hear(c.id, lastWord{until: now.Add(delay).UnixMilli(), reason: delayReason(cl.Outcome)})
}

// hear merges w into the word of id: each deadline the later of the two
// (a denial of every call keeps its reason). l.mu must be held.
func (l *local) hear(id ID, w lastWord) {
	if old, ok := l.words[id]; ok {
		if old.until >= w.until {
			w.until, w.reason = old.until, old.reason
		}
		w.retryUntil = max(w.retryUntil, old.retryUntil)
		l.words[id] = w
		return
	}
	if len(l.words) >= maxLocalStates {
		for k, old := range l.words {
			if max(old.until, old.retryUntil) < max(w.until, w.retryUntil) {
				delete(l.words, k)
				break
			}
		}
		if len(l.words) >= maxLocalStates {
			return
		}
	}
	l.words[id] = w
}

// word returns the denial still in force for id at nowMs for a call
// (retry: a retry there), dropping a spent one: its reason, and until in
// the deadline that denies the call. l.mu must be held.
func (l *local) word(id ID, nowMs int64, retry bool) (lastWord, bool) {
	w, ok := l.words[id]
	if !ok {
		return lastWord{}, false
	}
	switch {
	case nowMs >= w.until && nowMs >= w.retryUntil:
		delete(l.words, id)
	case nowMs < w.until:
		return lastWord{until: w.until, reason: w.reason}, true
	case retry:
		return lastWord{until: w.retryUntil, reason: ReasonRetryBudget}, true
	}
	return lastWord{}, false
}

// delayReason is the reason cooldownd gives for the delay of a report
// with outcome o.
func delayReason(o Outcome) DenyReason {
	switch o {
	case OutcomeQuotaExhausted:
		return ReasonQuota
	case OutcomeAuthFailure:
		return ReasonAuth
	case OutcomeOverloaded:
		return ReasonOverloaded
	}
	return ReasonCooldown
}
