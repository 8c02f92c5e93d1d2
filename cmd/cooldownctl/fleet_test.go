package main

import (
	"bytes"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// edits change what the server answers about connections: each state and
// transition, and the effective policy of GetConnection, by connection id.
type edits struct {
	state      func(c *cooldownv1.ConnectionState)
	transition func(id []byte, t *cooldownv1.Transition)
	policy     func(id []byte, p *cooldownv1.Policy)
}

// patchAnswers makes ts answer ListConnections and GetConnection through
// its own handler and then applies ed to the answer (as protobuf or JSON,
// whichever the server wrote), so a test can show states that carry fields
// the store does not fill yet.
func patchAnswers(t *testing.T, ts *servertest.Server, ed edits) {
	t.Helper()
	h := ts.Server().Handler()
	ts.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		var msg proto.Message
		switch path.Base(r.URL.Path) {
		case "ListConnections":
			msg = &cooldownv1.ListConnectionsResponse{}
		case "GetConnection":
			msg = &cooldownv1.GetConnectionResponse{}
		default:
			return false
		}
		r.Header.Del("Accept-Encoding") // the answer is edited: uncompressed
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		res := rec.Result()
		body := rec.Body.Bytes()
		json := strings.HasPrefix(res.Header.Get("Content-Type"), "application/json")
		if res.StatusCode == http.StatusOK {
			var err error
			if json {
				err = protojson.Unmarshal(body, msg)
			} else {
				err = proto.Unmarshal(body, msg)
			}
			if err != nil {
				t.Errorf("decode %s: %v", r.URL.Path, err)
				return false
			}
			switch m := msg.(type) {
			case *cooldownv1.ListConnectionsResponse:
				for _, c := range m.GetConnections() {
					ed.state(c)
				}
			case *cooldownv1.GetConnectionResponse:
				if c := m.GetConnection(); c != nil {
					ed.state(c)
					if m.GetPolicy() != nil {
						ed.policy(c.GetConnection().GetId(), m.GetPolicy())
					}
					for _, tr := range m.GetHistory() {
						ed.transition(c.GetConnection().GetId(), tr)
					}
				}
			}
			if json {
				body, err = protojson.Marshal(msg)
			} else {
				body, err = proto.Marshal(msg)
			}
			require.NoError(t, err)
		}
		for k, v := range res.Header {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(body)
		return true
	})
}

// TestFleetRulesInTheConnectionView: get and list show a shadow policy's
// states as not enforced, the fleet counts with the rule they trigger
// (throttled, retry_budget), and the new policy rows.
func TestFleetRulesInTheConnectionView(t *testing.T) {
	t.Parallel()
	ts := servertest.Start(t, servertest.WithProtocol(servertest.HTTP1), servertest.WithAuth(servertest.Tokens(t)))
	hc := &http.Client{Transport: bearerTransport{base: http.DefaultTransport, token: servertest.ClientToken}}
	s := &testServer{url: ts.URL, app: cooldownv1connect.NewCooldownServiceClient(hc, ts.URL)}
	shadow, fleet, plain, quiet := servertest.NewID(), servertest.NewID(), servertest.NewID(), servertest.NewID()
	s.report(t, shadow, "openai gpt-4o", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, time.Minute)
	s.report(t, fleet, "anthropic claude", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, 0)
	s.report(t, plain, "gemini", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, 0)
	s.report(t, quiet, "mistral", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, 0)
	patchAnswers(t, ts, edits{
		state: func(c *cooldownv1.ConnectionState) {
			switch id := c.GetConnection().GetId(); {
			case bytes.Equal(id, shadow):
				c.Shadow = true
			case bytes.Equal(id, fleet):
				c.Fleet = &cooldownv1.FleetCounts{FirstAttempts: 120, Retries: 25, Requests: 140.25, Accepts: 30,
					ThrottleProbability: 0.3521, FailureReporters: 1}
				// What the server explains of those counts under the policy below.
				c.Explanation = &cooldownv1.Explanation{Severity: 30, ThrottleProbability: 0.3521, Throttling: true,
					RetryBudget: &cooldownv1.RetryBudget{Retries: 25, Allowed: 24}, QuorumReporters: 1, QuorumNeeded: 2,
					Reasons: []string{"throttling 35.2% of calls (throttled)", "retry budget spent (25 of 24 retries over 30s): retries are denied (retry_budget)"}}
			case bytes.Equal(id, quiet):
				c.Fleet = &cooldownv1.FleetCounts{} // as with every fleet rule off: no counts kept
			}
		},
		transition: func(id []byte, tr *cooldownv1.Transition) { tr.Shadow = bytes.Equal(id, shadow) },
		policy: func(id []byte, p *cooldownv1.Policy) {
			switch {
			case bytes.Equal(id, shadow):
				p.Shadow = true
			case bytes.Equal(id, fleet):
				p.RetryBudget, p.RetryBudgetMin, p.ThrottleK, p.TripQuorum = 0.2, 0, 2, 2
				p.FleetWindow = durationpb.New(30 * time.Second)
			}
		},
	})

	r := s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `openai gpt-4o\s+open \[shadow\]\s+rate_limit\s`, lineWith(t, r.stdout, hex.EncodeToString(shadow)[:8]))
	assert.Regexp(t, `anthropic claude\s+closed\s+-`, lineWith(t, r.stdout, hex.EncodeToString(fleet)[:8]))
	at := func(id []byte) int { return strings.Index(r.stdout, hex.EncodeToString(id)[:8]) }
	assert.Less(t, at(shadow), at(fleet), "open first")
	assert.Less(t, at(fleet), min(at(plain), at(quiet)), "a throttle rejecting calls before the healthy")

	r = s.ctl(t, viewer(), "get", hex.EncodeToString(shadow))
	require.NoError(t, r.err, r.stderr)
	for _, want := range []string{
		`State\s+open \[shadow\] \(rate_limit\)\n`,
		`Shadow\s+yes: this state is not enforced, calls are allowed \(its policy's decisions are computed and published, not enforced\)\n`,
		`closed\s+open\s+rate_limit \[shadow\]\s+\d+`,
		`\nShadow\s+on: decisions and transitions are computed and published, not enforced \(operator overrides are\)\n`,
	} {
		assert.Regexp(t, want, r.stdout)
	}

	r = s.ctl(t, viewer(), "get", hex.EncodeToString(fleet))
	require.NoError(t, r.err, r.stderr)
	for _, want := range []string{
		`\nFleet over 30s\s+120 first attempts, 25 retries, 140.3 requests, 30 accepts\n`,
		`\nThrottle\s+35.2% of calls are denied \(throttled\)\n`,
		`\nWhy\s+throttling 35.2% of calls \(throttled\)\n\s+retry budget spent \(25 of 24 retries over 30s\): retries are denied \(retry_budget\)\n`,
		`\nRetry budget\s+spent \(25 of 24 retries\): further retries are denied \(retry_budget\) and should fall back\n`,
		`\nFailure reporters\s+1 of the 2 that transient failures need to trip \(trip quorum\)\n`,
		`\nRetry budget\s+20% of the fleet's first attempts over the fleet window\n`,
		`\nRetry budget min\s+0 retries/s whatever the ratio\n`,
		`\nThrottle K\s+2: while closed, reject with probability max\(0, \(requests - 2\*accepts\) / \(requests \+ 1\)\)\n`,
		`\nTrip quorum\s+2 distinct reporters of transient failures within the fleet window\n`,
		`\nFleet window\s+30s\n`,
		`\nShadow\s+off\n`,
	} {
		assert.Regexp(t, want, r.stdout)
	}
	assert.NotRegexp(t, `\nShadow\s+yes`, r.stdout, "an enforced policy's state has no shadow row")

	// The server's own counts: the default retry budget counts the one
	// first attempt reported (weighted: below 1 once its bucket is the
	// older one); 3/s × 30 s allow 90 retries.
	r = s.ctl(t, viewer(), "get", hex.EncodeToString(plain))
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `\nFleet over 30s\s+(1|0\.\d) first attempts, 0 retries, 0 requests, 0 accepts\n`, r.stdout)
	assert.Regexp(t, `\nRetry budget\s+0 of 90 retries used, 90 left\n`, r.stdout)
	assert.Regexp(t, `\nRetry budget\s+20% of the fleet's first attempts over the fleet window\n`, r.stdout)
	assert.NotContains(t, r.stdout, "[shadow]")

	r = s.ctl(t, viewer(), "get", hex.EncodeToString(quiet))
	require.NoError(t, r.err, r.stderr)
	assert.NotRegexp(t, `\nFleet( over \S+)?\s{2,}\d`, r.stdout, "no fleet counts: no fleet row")
	for _, row := range []string{"Retry budget", "Retry budget min", "Throttle K", "Trip quorum", "Fleet window", "Shadow"} {
		assert.Regexp(t, `\n`+regexp.QuoteMeta(row)+`\s{2,}\S`, r.stdout, "the policy has a %s row", row)
	}
}

// TestFleetRows: the fleet counts explain which rule denies calls now,
// and how a shadow policy or a state other than closed changes that.
func TestFleetRows(t *testing.T) {
	t.Parallel()
	window := durationpb.New(10 * time.Second)
	budget := &cooldownv1.Policy{RetryBudget: 0.5, RetryBudgetMin: 3, FleetWindow: window}
	left := func(retries, allowed float64, n uint32) *cooldownv1.Explanation {
		return &cooldownv1.Explanation{RetryBudget: &cooldownv1.RetryBudget{Retries: retries, Allowed: allowed, RetriesLeft: n}}
	}
	throttle := func(p float64, applies bool) *cooldownv1.Explanation {
		return &cooldownv1.Explanation{ThrottleProbability: p, Throttling: applies}
	}
	for _, tc := range []struct {
		name  string
		state *cooldownv1.ConnectionState
		p     *cooldownv1.Policy
		want  []string // rows as "name: value"
	}{
		{"no counts", &cooldownv1.ConnectionState{Fleet: &cooldownv1.FleetCounts{}, Explanation: left(0, 30, 30)}, budget, nil},
		{"no fleet message", &cooldownv1.ConnectionState{}, nil, nil},
		{"within the budget", &cooldownv1.ConnectionState{Fleet: &cooldownv1.FleetCounts{FirstAttempts: 10, Retries: 12}, Explanation: left(12, 30, 18)}, budget,
			[]string{"Fleet over 10s: 10 first attempts, 12 retries, 0 requests, 0 accepts", "Retry budget: 12 of 30 retries used, 18 left"}},
		{"spent", &cooldownv1.ConnectionState{Fleet: &cooldownv1.FleetCounts{FirstAttempts: 100, Retries: 49.5}, Explanation: left(49.5, 50, 0)}, budget,
			[]string{"Fleet over 10s: 100 first attempts, 49.5 retries, 0 requests, 0 accepts",
				"Retry budget: spent (49.5 of 50 retries): further retries are denied (retry_budget) and should fall back"}},
		{"the server's word, not a formula", &cooldownv1.ConnectionState{Fleet: &cooldownv1.FleetCounts{FirstAttempts: 100, Retries: 1}, Explanation: left(1, 50, 0)}, budget,
			[]string{"Fleet over 10s: 100 first attempts, 1 retries, 0 requests, 0 accepts",
				"Retry budget: spent (1 of 50 retries): further retries are denied (retry_budget) and should fall back"}},
		{"spent in shadow", &cooldownv1.ConnectionState{Shadow: true, Fleet: &cooldownv1.FleetCounts{Retries: 40}, Explanation: left(40, 30, 0)}, budget,
			[]string{"Fleet over 10s: 0 first attempts, 40 retries, 0 requests, 0 accepts",
				"Retry budget: spent (40 of 30 retries): further retries would be denied (shadow: not enforced) (retry_budget) and should fall back"}},
		{"throttling", &cooldownv1.ConnectionState{State: cooldownv1.State_STATE_CLOSED, Fleet: &cooldownv1.FleetCounts{Requests: 10, ThrottleProbability: 0.5}, Explanation: throttle(0.5, true)},
			&cooldownv1.Policy{ThrottleK: 2, FleetWindow: window},
			[]string{"Fleet over 10s: 0 first attempts, 0 retries, 10 requests, 0 accepts", "Throttle: 50% of calls are denied (throttled)"}},
		{"a throttle that does not apply now", &cooldownv1.ConnectionState{State: cooldownv1.State_STATE_OPEN, Fleet: &cooldownv1.FleetCounts{ThrottleProbability: 0.25}, Explanation: throttle(0.25, false)}, nil,
			[]string{"Fleet: 0 first attempts, 0 retries, 0 requests, 0 accepts",
				"Throttle: 25% of calls once closed (throttled; the throttle applies only while closed)"}},
		{"throttling in shadow", &cooldownv1.ConnectionState{Shadow: true, Fleet: &cooldownv1.FleetCounts{ThrottleProbability: 0.125}, Explanation: throttle(0.125, true)}, nil,
			[]string{"Fleet: 0 first attempts, 0 retries, 0 requests, 0 accepts",
				"Throttle: 12.5% of calls would be denied (shadow: not enforced) (throttled)"}},
		{"reporters without a quorum", &cooldownv1.ConnectionState{Fleet: &cooldownv1.FleetCounts{FailureReporters: 3}}, nil,
			[]string{"Fleet: 0 first attempts, 0 retries, 0 requests, 0 accepts", "Failure reporters: 3"}},
		{"reporters toward a quorum", &cooldownv1.ConnectionState{Fleet: &cooldownv1.FleetCounts{FailureReporters: 1},
			Explanation: &cooldownv1.Explanation{QuorumReporters: 1, QuorumNeeded: 3}}, &cooldownv1.Policy{TripQuorum: 3, FleetWindow: window},
			[]string{"Fleet over 10s: 0 first attempts, 0 retries, 0 requests, 0 accepts",
				"Failure reporters: 1 of the 3 that transient failures need to trip (trip quorum)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, r := range fleetRows(tc.state, tc.p) {
				got = append(got, r[0]+": "+r[1])
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestPolicyRowsOff: every fleet rule that is off says so.
func TestPolicyRowsOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    *cooldownv1.Policy
		want []string
	}{
		{"every rule off", &cooldownv1.Policy{}, []string{`Retry budget\s+off\n`, `Retry budget min\s+off \(no retry budget\)\n`,
			`Throttle K\s+off\n`, `Trip quorum\s+off \(one reporter's failures trip\)\n`, `Fleet window\s+off\n`, `Shadow\s+off\n`}},
		{"a window no rule reads", &cooldownv1.Policy{TripQuorum: 1, FleetWindow: durationpb.New(time.Minute)},
			[]string{`Trip quorum\s+off \(one reporter's failures trip\)\n`, `Fleet window\s+1m \(unused: no fleet rule is on\)\n`}},
		{"a decimal K", &cooldownv1.Policy{ThrottleK: 1.5, FleetWindow: durationpb.New(1500 * time.Millisecond)},
			[]string{`Throttle K\s+1.5: while closed, reject with probability max\(0, \(requests - 1.5\*accepts\)`, `Fleet window\s+1.5s\n`}},
		{"shadow", &cooldownv1.Policy{Shadow: true}, []string{`Shadow\s+on: decisions and transitions are computed and published, not enforced`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			(&env{stdout: &out}).printPolicy(tc.p)
			for _, w := range tc.want {
				assert.Regexp(t, w, out.String())
			}
		})
	}
}

// TestWatchMarksShadowTransitions: watch says a shadow policy's
// transition was not enforced.
func TestWatchMarksShadowTransitions(t *testing.T) {
	t.Parallel()
	id := servertest.NewID()
	for _, tc := range []struct {
		shadow bool
		want   string
	}{
		{false, `closed    → open       rate_limit     rev 7  oncall: drill$`},
		{true, `closed    → open       rate_limit     rev 7  \[shadow: not enforced\]  oncall: drill$`},
	} {
		var out bytes.Buffer
		e := &env{stdout: &out, g: globals{output: "table"}}
		require.NoError(t, e.printEvent(&cooldownv1.WatchConnectionsResponse{
			Connection: &cooldownv1.ConnectionState{Connection: &cooldownv1.Connection{Id: id, Label: "openai"}, State: cooldownv1.State_STATE_OPEN, Shadow: tc.shadow},
			Transition: &cooldownv1.Transition{Time: timestamppb.Now(), From: cooldownv1.State_STATE_CLOSED, To: cooldownv1.State_STATE_OPEN,
				Cause: cooldownv1.Cause_CAUSE_RATE_LIMIT, Revision: 7, Actor: "oncall", Reason: "drill", Shadow: tc.shadow},
		}))
		assert.Regexp(t, tc.want, strings.TrimRight(out.String(), "\n"))
		out.Reset()
		require.NoError(t, e.printEvent(&cooldownv1.WatchConnectionsResponse{
			Connection: &cooldownv1.ConnectionState{Connection: &cooldownv1.Connection{Id: id, Label: "openai"}, State: cooldownv1.State_STATE_OPEN, Shadow: tc.shadow}}))
		assert.Equal(t, tc.shadow, strings.Contains(out.String(), "open [shadow]"), out.String())
	}
}
