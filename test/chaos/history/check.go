package history

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// Violation is one broken property, with the ops that show it.
type Violation struct {
	Property string
	Conn     string
	Detail   string
	Ops      []Op
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on …%s: %s\n", v.Property, short(v.Conn), v.Detail)
	for _, o := range v.Ops {
		b.WriteString("    ")
		b.WriteString(o.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// byConn groups ops by connection, each group sorted by call time.
func byConn(ops []Op) map[string][]Op {
	m := map[string][]Op{}
	for _, o := range ops {
		m[o.Conn] = append(m[o.Conn], o)
	}
	for _, g := range m {
		slices.SortStableFunc(g, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
	}
	return m
}

// lease is one probe lease as the history shows it: live from its grant
// to the first of its expiry, its settlement and the next transition.
type lease struct {
	grant Op
	start int64
	// end is the earliest the lease may have ended, taking every
	// settlement whose outcome is unknown (its answer lost or an error) as
	// applied at its call; last the latest, taking them as never applied
	// (the lease then ran to its expiry). An op without an answer is
	// possibly applied and possibly not: a property that more leases break
	// (max_probes) is checked against end, one that fewer leases break (a
	// probe-in-flight denial needs a live lease) against last.
	end, last int64
}

// Check verifies the safety properties over a whole run (see the package
// doc and docs/reliability.md). p is the servers' policy.
func Check(ops []Op, p breaker.Policy) []Violation {
	var out []Violation
	for id, g := range byConn(ops) {
		ls := leases(g)
		out = append(out, checkProbes(id, ls, p)...)
		out = append(out, checkStale(id, g)...)
		out = append(out, checkCooldowns(id, g)...)
		out = append(out, checkDenials(id, g, ls, p)...)
	}
	slices.SortFunc(out, func(a, b Violation) int { return strings.Compare(a.Property+a.Conn, b.Property+b.Conn) })
	return out
}

// leases reconstructs the probe leases of one connection.
func leases(g []Op) []lease {
	var out []lease
	for _, o := range g {
		if o.Kind != Admit || !o.OK() || o.Res.Decision != int(breaker.AllowProbe) {
			continue
		}
		l := lease{grant: o, start: o.Res.ServerTime, end: o.Res.LeaseExp}
		for _, x := range g {
			if x.Kind == Extend && x.LeaseToken == o.Res.LeaseToken && !x.OK() {
				// An extension whose outcome is unknown may have moved the
				// expiry as far as its TTL from its return (or the policy's).
				ret := x.Return
				if ret == 0 { // no answer: its return is open-ended
					ret = math.MaxInt64 / 2
				}
				l.last = max(l.last, ret+max(x.TTL, Policy().LeaseTTL.Milliseconds()))
			}
			if x.Kind == Extend && x.LeaseToken == o.Res.LeaseToken && x.OK() {
				l.end = max(l.end, x.Res.LeaseExp)
			}
		}
		l.last = max(l.last, l.end)
		if o.Res.NotReplicated {
			// Granted on a master short of replicas: a failover may lose
			// the grant at once, and the slot with it (max_probes counts
			// it as ended at its start; a denial may still lean on it
			// until last).
			l.end = l.start
		}
		for _, x := range g {
			switch {
			case x.Kind == Report && x.LeaseToken == o.Res.LeaseToken && x.OK() && x.Res.NotReplicated:
				l.end = min(l.end, x.Res.ServerTime) // a failover may lose it
			case x.Kind == Report && x.LeaseToken == o.Res.LeaseToken && x.OK():
				l.end, l.last = min(l.end, x.Res.ServerTime), min(l.last, x.Res.ServerTime)
			case x.Kind == Report && x.LeaseToken == o.Res.LeaseToken && !x.OK():
				// A lost or failed settlement may have landed as early as
				// its call, or never: end takes the one, last the other.
				l.end = min(l.end, x.Call)
			}
		}
		// Every transition ends the leases of the revision before it. One
		// seen only by answers NOT_REPLICATED may be a write a failover
		// loses (the demoted master serves what it took after the
		// promotion while the promoted one grants on the revision before):
		// it may have ended the lease (end) or not (last).
		for _, x := range g {
			if x.OK() && x.Kind != Get && x.Res.ServerTime >= l.start && x.Res.Revision > o.Res.Revision {
				l.end = min(l.end, x.Res.ServerTime)
				if !x.Res.NotReplicated {
					l.last = min(l.last, x.Res.ServerTime)
				}
			}
		}
		out = append(out, l)
	}
	return out
}

// checkProbes: at most MaxProbes leases live at any instant.
func checkProbes(id string, ls []lease, p breaker.Policy) []Violation {
	var out []Violation
	for i, a := range ls {
		live := []Op{a.grant}
		for j, b := range ls {
			if i != j && b.start <= a.start && a.start < b.end {
				live = append(live, b.grant)
			}
		}
		if len(live) > p.MaxProbes {
			out = append(out, Violation{Property: "at most max_probes probes in flight", Conn: id,
				Detail: fmt.Sprintf("%d leases live at %d (max %d)", len(live), a.start, p.MaxProbes), Ops: live})
		}
	}
	return out
}

// checkStale: a report accepted on its revision alone (no live lease) must
// carry the revision current when it was applied, so a stale success never
// clears a newer failure and a stale failure never re-opens a recovery.
func checkStale(id string, g []Op) []Violation {
	var out []Violation
	for _, r := range g {
		if r.Kind != Report || !r.OK() || !r.Res.Accepted || r.LeaseToken != "" {
			continue
		}
		for _, x := range g {
			if x.OK() && !x.Res.NotReplicated && x.Kind != Get && x.Res.ServerTime < r.Res.ServerTime && x.Res.Revision > r.Revision {
				out = append(out, Violation{Property: "no stale report accepted", Conn: id,
					Detail: fmt.Sprintf("report of revision %d accepted at %d after revision %d was seen at %d",
						r.Revision, r.Res.ServerTime, x.Res.Revision, x.Res.ServerTime), Ops: []Op{x, r}})
				break
			}
		}
	}
	return out
}

// checkCooldowns: a server delay a report carried is never shortened: no
// call is admitted before it ends.
func checkCooldowns(id string, g []Op) []Violation {
	var out []Violation
	for _, r := range g {
		hinted := r.Outcome >= int(breaker.OutcomeRateLimited) && r.Outcome <= int(breaker.OutcomeAuthFailure)
		if r.Kind != Report || !r.OK() || r.RetryAfter <= 0 || !hinted || r.Res.NotReplicated {
			continue
		}
		until := r.Res.ServerTime + r.RetryAfter
		for _, a := range g {
			if a.Kind == Admit && a.OK() && a.Res.Decision != int(breaker.Deny) &&
				a.Res.ServerTime > r.Res.ServerTime && a.Res.ServerTime < until {
				out = append(out, Violation{Property: "no cooldown shortened", Conn: id,
					Detail: fmt.Sprintf("admitted at %d inside a cooldown until %d", a.Res.ServerTime, until), Ops: []Op{r, a}})
				break
			}
		}
	}
	return out
}

// checkDenials: every denial's retry_after is consistent with the state:
// positive, ending at available_at, and a probe-in-flight denial has a
// lease live at its instant that ends within retry_after.
func checkDenials(id string, g []Op, ls []lease, p breaker.Policy) []Violation {
	var out []Violation
	lostGrant := func(t int64) bool { // a grant whose answer was lost may hold the slot
		for _, o := range g {
			if o.Kind == Admit && o.Lost() && o.Call <= t {
				return true
			}
		}
		return false
	}
	for _, a := range g {
		if a.Kind != Admit || !a.OK() || a.Res.Decision != int(breaker.Deny) {
			continue
		}
		bad := func(format string, args ...any) {
			out = append(out, Violation{Property: "denials consistent with the state", Conn: id,
				Detail: fmt.Sprintf(format, args...), Ops: []Op{a}})
		}
		switch {
		case a.Res.RetryAfter <= 0:
			bad("retry_after %d ms <= 0", a.Res.RetryAfter)
			continue
		case a.Res.AvailAt != a.Res.ServerTime+a.Res.RetryAfter:
			bad("available_at %d != server time %d + retry_after %d", a.Res.AvailAt, a.Res.ServerTime, a.Res.RetryAfter)
			continue
		}
		if a.Res.Reason != int(breaker.ReasonProbeInFlight) {
			continue
		}
		t := a.Res.ServerTime
		ok := false
		for _, l := range ls {
			if l.start <= t && t < l.last+1 && l.grant.Res.Revision == a.Res.Revision {
				ok = true
			}
		}
		if !ok && !lostGrant(t) {
			bad("probe in flight at %d but no lease of revision %d is live", t, a.Res.Revision)
		}
		if a.Res.RetryAfter > p.LeaseTTL.Milliseconds() && !extended(g) {
			bad("probe-in-flight retry_after %d ms above the lease TTL", a.Res.RetryAfter)
		}
	}
	return out
}

func extended(g []Op) bool {
	for _, o := range g {
		if o.Kind == Extend {
			return true
		}
	}
	return false
}
