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
type lastWord struct {
	until  int64 // Unix ms
	reason DenyReason
}

// learn records what cooldownd said of each candidate it examined: a
// denial with a wait holds until it runs out; an admission clears it.
func (l *local) learn(now time.Time, m *cooldownv1.AdmitResponse, cands []Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	nowMs := now.UnixMilli()
	for i, d := range m.GetCandidates() {
		if i >= len(cands) {
			break
		}
		id := cands[i].id
		switch Decision(d.GetDecision()) {
		case DecisionAllow, DecisionAllowProbe:
			delete(l.words, id)
		case DecisionDeny:
			if wait := d.GetRetryAfter().AsDuration(); wait > 0 {
				l.hear(id, lastWord{until: nowMs + wait.Milliseconds(), reason: DenyReason(d.GetDenyReason())})
			}
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

// hear stores w, keeping the later of two words. l.mu must be held.
func (l *local) hear(id ID, w lastWord) {
	if old, ok := l.words[id]; ok && old.until >= w.until {
		return
	}
	if len(l.words) >= maxLocalStates {
		for k, old := range l.words {
			if old.until < w.until {
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

// word returns the denial still in force for id at nowMs, dropping a
// spent one. l.mu must be held.
func (l *local) word(id ID, nowMs int64) (lastWord, bool) {
	w, ok := l.words[id]
	if !ok {
		return lastWord{}, false
	}
	if nowMs >= w.until {
		delete(l.words, id)
		return lastWord{}, false
	}
	return w, true
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
