package client

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// updateGuardTrace rewrites testdata/guard_trace.json from guardPolicy.next:
//
//	go test ./client -run TestGuardTrace -update-guard-trace
var updateGuardTrace = flag.Bool("update-guard-trace", false, "rewrite ../testdata/guard_trace.json from guardPolicy.next")

const guardTracePath = "../testdata/guard_trace.json"

// guardTrace is testdata/guard_trace.json: the guard's next step
// ([guardPolicy.next], decision 0029) on seeded inputs, the one
// specification the Go guard (TestGuardTrace) and the TypeScript guard
// (clients/ts/test/guard.test.ts, src/guard.ts next) are both held to.
type guardTrace struct {
	Comment string           `json:"comment"`
	Cases   []guardTraceCase `json:"cases"`
}

// guardTraceCase is one call of next, in whole milliseconds (the TS
// client's unit). Every duration in the inputs is a multiple of 10 ms and
// the backoff's base and cap are even, where Go's nanosecond arithmetic
// (d/10, d/2) and the TS client's whole milliseconds agree exactly.
//
// The jitter source returns floor(jitter × ceil(n in ms)) ms for the bound
// n it is given; want.jitterBoundMs records that bound (ceil, in ms; 0: no
// draw), so a changed bound fails even when the delay happens to agree.
type guardTraceCase struct {
	Policy struct {
		MaxRetries    int   `json:"maxRetries"`
		MaxWaitMs     int64 `json:"maxWaitMs"`
		NoWait        bool  `json:"noWait,omitempty"`
		ProbePollMs   int64 `json:"probePollMs"`
		BackoffBaseMs int64 `json:"backoffBaseMs"`
		BackoffCapMs  int64 `json:"backoffCapMs"`
	} `json:"policy"`
	Budget struct {
		Retries    int   `json:"retries"`
		WaitedMs   int64 `json:"waitedMs"`
		Candidates int   `json:"candidates"`
		NowMs      int64 `json:"nowMs"`
		DeadlineMs int64 `json:"deadlineMs,omitempty"` // 0: none
	} `json:"budget"`
	Round struct {
		Denied       bool   `json:"denied"`
		Reason       string `json:"reason,omitempty"`  // a denial's
		RetryAfterMs int64  `json:"retryAfterMs"`      // the denial's, or the classification's
		Outcome      string `json:"outcome,omitempty"` // a failure's
		Retryable    bool   `json:"retryable,omitempty"`
		Opened       bool   `json:"opened,omitempty"`
	} `json:"round"`
	Jitter float64       `json:"jitter"`
	Want   guardTraceOut `json:"want"`
}

type guardTraceOut struct {
	Kind          string `json:"kind"`
	DelayMs       int64  `json:"delayMs,omitempty"`
	JitterBoundMs int64  `json:"jitterBoundMs,omitempty"`
}

const guardTraceComment = "The guard's next step (client/guard.go guardPolicy.next, decision 0029) on seeded inputs, in ms. " +
	"Written by `go test ./client -run TestGuardTrace -update-guard-trace`; checked against Go's next by TestGuardTrace " +
	"and against clients/ts/src/guard.ts next by clients/ts/test/guard.test.ts. The jitter source returns " +
	"floor(jitter * ceil(bound in ms)) ms; want.jitterBoundMs is that bound (0: no draw). A field left out is 0 (false); deadlineMs 0: no deadline."

// run calls Go's next on the case and returns what it did.
func (tc guardTraceCase) run(t testing.TB) guardTraceOut {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	var bound int64
	p := guardPolicy{
		maxRetries: tc.Policy.MaxRetries, maxWait: ms(tc.Policy.MaxWaitMs), noWait: tc.Policy.NoWait,
		probePoll: ms(tc.Policy.ProbePollMs), backoffBase: ms(tc.Policy.BackoffBaseMs), backoffCap: ms(tc.Policy.BackoffCapMs),
		jitter: func(n time.Duration) time.Duration {
			require.Zero(t, bound, "next draws the jitter once at most")
			require.Positive(t, n)
			bound = int64((n + time.Millisecond - 1) / time.Millisecond)
			return ms(int64(math.Floor(tc.Jitter * float64(bound))))
		},
	}
	b := budget{retries: tc.Budget.Retries, waited: ms(tc.Budget.WaitedMs), candidates: tc.Budget.Candidates,
		now: time.UnixMilli(tc.Budget.NowMs)}
	if tc.Budget.DeadlineMs != 0 {
		b.deadline = time.UnixMilli(tc.Budget.DeadlineMs)
	}
	var r round
	if tc.Round.Denied {
		r = round{denied: true, reason: reasonNamed(t, tc.Round.Reason), retryAfter: ms(tc.Round.RetryAfterMs)}
	} else {
		r = round{cl: Classification{Outcome: outcomeNamed(t, tc.Round.Outcome), Retryable: tc.Round.Retryable,
			RetryAfter: ms(tc.Round.RetryAfterMs)}, opened: tc.Round.Opened}
	}
	st := p.next(b, r)
	require.Zero(t, st.delay%time.Millisecond, "a delay in whole ms")
	return guardTraceOut{Kind: st.kind.String(), DelayMs: int64(st.delay / time.Millisecond), JitterBoundMs: bound}
}

func reasonNamed(t testing.TB, name string) DenyReason {
	for r := range DenyReason(16) {
		if r.String() == name {
			return r
		}
	}
	t.Fatalf("no deny reason %q", name)
	return 0
}

func outcomeNamed(t testing.TB, name string) Outcome {
	for o := range Outcome(16) {
		if o.String() == name {
			return o
		}
	}
	t.Fatalf("no outcome %q", name)
	return 0
}

// TestGuardTrace holds guardPolicy.next to testdata/guard_trace.json, the
// trace the TypeScript guard replays, and checks that the trace reaches
// every branch of next (a trace that skipped one would let that branch of
// either port drift unseen).
func TestGuardTrace(t *testing.T) {
	t.Parallel()
	if *updateGuardTrace {
		writeGuardTrace(t)
	}
	tr := readFixture[guardTrace](t, "guard_trace.json")
	require.NotEmpty(t, tr.Cases)
	reached := map[string]int{}
	for _, branch := range guardBranches {
		reached[branch] = 0
	}
	for i, tc := range tr.Cases {
		got := tc.run(t)
		if !assert.Equal(t, tc.Want, got, "case %d: %s", i, caseJSON(tc)) {
			continue
		}
		for _, branch := range branchesOf(t, tc) {
			reached[branch]++
		}
	}
	for branch, n := range reached {
		assert.Positive(t, n, "the trace never reaches %q", branch)
	}
	t.Logf("%d cases; branches reached: %v", len(tr.Cases), reached)
}

// guardBranches are the branches of next the trace must reach.
var guardBranches = []string{
	"denial/next (per-call reason, another candidate)", "denial/stop (per-call reason, the last candidate)",
	"denial/stop (no-wait)", "denial/stop (longer than the wait left)", "denial/stop (past the deadline)",
	"denial/wait", "denial/wait (the least wait)", "denial/wait (the probe poll)", "denial/wait (clamped to the wait left)",
	"denial/wait (ending at the deadline)",
	"failure/switch", "failure/retry", "failure/retry (the overload floor)", "failure/retry (the provider's retry-after)",
	"failure/retry (the backoff's cap)", "failure/stop (reaching the deadline)", "failure/next", "failure/stop",
	"failure/stop (retries used up)",
}

// branchesOf names what a case exercises, from its inputs and recorded
// answer (and, for the deadline, the answer without one).
func branchesOf(t testing.TB, tc guardTraceCase) []string {
	r, w := tc.Round, tc.Want
	perCall := r.Reason == ReasonRetryBudget.String() || r.Reason == ReasonThrottled.String()
	withoutDeadline := func() guardTraceOut {
		c := tc
		c.Budget.DeadlineMs = 0
		return c.run(t)
	}
	var out []string
	add := func(ok bool, name string) {
		if ok {
			out = append(out, name)
		}
	}
	if r.Denied {
		left := tc.Policy.MaxWaitMs - tc.Budget.WaitedMs
		add(w.Kind == "next", "denial/next (per-call reason, another candidate)")
		add(perCall && w.Kind == "stop", "denial/stop (per-call reason, the last candidate)")
		add(!perCall && tc.Policy.NoWait, "denial/stop (no-wait)")
		add(!perCall && !tc.Policy.NoWait && w.Kind == "stop" && w.JitterBoundMs == 0, "denial/stop (longer than the wait left)")
		add(w.Kind == "stop" && w.JitterBoundMs > 0 && withoutDeadline().Kind == "wait", "denial/stop (past the deadline)")
		add(w.Kind == "wait", "denial/wait")
		add(w.Kind == "wait" && r.RetryAfterMs < minDenyWait.Milliseconds(), "denial/wait (the least wait)")
		add(w.Kind == "wait" && r.Reason == ReasonProbeInFlight.String() && r.RetryAfterMs > tc.Policy.ProbePollMs, "denial/wait (the probe poll)")
		add(w.Kind == "wait" && w.DelayMs == left && tc.Jitter*float64(w.JitterBoundMs) >= 1, "denial/wait (clamped to the wait left)")
		add(w.Kind == "wait" && tc.Budget.DeadlineMs == tc.Budget.NowMs+w.DelayMs, "denial/wait (ending at the deadline)")
		return out
	}
	add(w.Kind == "switch", "failure/switch")
	add(w.Kind == "retry", "failure/retry")
	add(w.Kind == "retry" && r.Outcome == OutcomeOverloaded.String() && w.DelayMs == overloadFloor.Milliseconds() &&
		r.RetryAfterMs < w.DelayMs, "failure/retry (the overload floor)")
	add(w.Kind == "retry" && r.RetryAfterMs > 0 && w.DelayMs == r.RetryAfterMs && r.RetryAfterMs > tc.Policy.BackoffCapMs,
		"failure/retry (the provider's retry-after)")
	add(w.Kind == "retry" && tc.Budget.Retries > 0 && tc.Policy.BackoffBaseMs<<tc.Budget.Retries > tc.Policy.BackoffCapMs,
		"failure/retry (the backoff's cap)")
	add(w.Kind == "stop" && w.JitterBoundMs > 0, "failure/stop (reaching the deadline)")
	add(w.Kind == "next", "failure/next")
	add(w.Kind == "stop", "failure/stop")
	add(w.Kind == "stop" && r.Retryable && tc.Budget.Retries >= tc.Policy.MaxRetries, "failure/stop (retries used up)")
	return out
}

func caseJSON(tc guardTraceCase) string {
	b, _ := json.Marshal(tc)
	return string(b)
}

// writeGuardTrace generates the trace: seeded random inputs drawn from
// small sets (so that boundaries such as a wait equal to the wait left
// come up often), each followed by its siblings at the deadline's edges.
func writeGuardTrace(t testing.TB) {
	rng := rand.New(rand.NewPCG(24, 4))
	pick := func(vs ...int64) int64 { return vs[rng.IntN(len(vs))] }
	reasons := []DenyReason{ReasonCooldown, ReasonOpen, ReasonProbeInFlight, ReasonQuota, ReasonAuth, ReasonForcedOpen,
		ReasonOverloaded, ReasonRetryBudget, ReasonThrottled}
	outcomes := []Outcome{OutcomeUnspecified, OutcomeTransientFailure, OutcomeRateLimited, OutcomeOverloaded,
		OutcomeQuotaExhausted, OutcomeAuthFailure, OutcomeClientError, OutcomeCanceled}
	var cases []guardTraceCase
	for range 400 {
		var tc guardTraceCase
		tc.Policy.MaxRetries = int(pick(0, 1, 2, 2, 3, 9))
		tc.Policy.MaxWaitMs = pick(10, 250, 1000, 1000, 30000, 30000)
		tc.Policy.NoWait = rng.IntN(8) == 0
		tc.Policy.ProbePollMs = pick(10, 100, 250, 1000)
		tc.Policy.BackoffBaseMs = pick(2, 100, 500, 500)
		tc.Policy.BackoffCapMs = max(tc.Policy.BackoffBaseMs, pick(2, 300, 400, 1000, 8000, 8000))
		tc.Budget.Retries = int(pick(0, 0, 1, 2, 3, 8))
		tc.Budget.WaitedMs = pick(0, 0, 0, 10, 100, 750, 960, 1000, 30000)
		tc.Budget.Candidates = int(pick(1, 1, 2, 3))
		tc.Budget.NowMs = 1_767_225_600_000 + 10*rng.Int64N(1000)
		if rng.IntN(5) < 2 {
			tc.Budget.DeadlineMs = tc.Budget.NowMs + pick(0, 10, 20, 50, 100, 250, 300, 1000, 5000, 8000, 60000)
		}
		if rng.IntN(2) == 0 {
			tc.Round.Denied = true
			tc.Round.Reason = reasons[rng.IntN(len(reasons))].String()
			tc.Round.RetryAfterMs = pick(0, 10, 20, 40, 100, 250, 300, 1000, 5000, 30000, 60000)
		} else {
			tc.Round.Outcome = outcomes[rng.IntN(len(outcomes))].String()
			tc.Round.Retryable = rng.IntN(3) > 0
			tc.Round.RetryAfterMs = pick(0, 0, 0, 10, 1000, 3000, 5000, 60000)
			tc.Round.Opened = rng.IntN(3) == 0
		}
		switch rng.IntN(3) {
		case 0:
			tc.Jitter = 0
		case 1:
			tc.Jitter = 0.999999
		default:
			tc.Jitter = rng.Float64()
		}
		tc.Want = tc.run(t)
		cases = append(cases, tc)
		if (tc.Want.Kind == "wait" || tc.Want.Kind == "retry") && tc.Budget.DeadlineMs == 0 {
			for _, off := range []int64{0, -1} {
				s := tc
				s.Budget.DeadlineMs = tc.Budget.NowMs + tc.Want.DelayMs + off
				s.Want = s.run(t)
				cases = append(cases, s)
			}
		}
	}
	var buf bytes.Buffer
	head, err := json.Marshal(guardTraceComment)
	require.NoError(t, err)
	fmt.Fprintf(&buf, "{\n  \"comment\": %s,\n  \"cases\": [\n", head)
	lines := make([]string, len(cases))
	for i, tc := range cases {
		lines[i] = "    " + caseJSON(tc)
	}
	buf.WriteString(strings.Join(lines, ",\n"))
	buf.WriteString("\n  ]\n}\n")
	require.NoError(t, os.WriteFile(guardTracePath, buf.Bytes(), 0o644))
}
