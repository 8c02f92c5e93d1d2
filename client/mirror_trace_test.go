package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// mirrorTrace is testdata/mirror.json: the mirror's rules, the same file
// the TypeScript client replays (clients/ts/test/mirror.test.ts).
type mirrorTrace struct {
	Cases []struct {
		Name  string      `json:"name"`
		Steps []traceStep `json:"steps"`
	} `json:"cases"`
}

type traceStep struct {
	Do           string  `json:"do"`
	Conn         string  `json:"conn"`
	Want         string  `json:"want"`
	Retry        bool    `json:"retry"`
	Ticket       string  `json:"ticket"`
	Decision     string  `json:"decision"`
	State        string  `json:"state"`
	Revision     uint64  `json:"revision"`
	Throttle     float64 `json:"throttle"`
	Shadowed     bool    `json:"shadowed"`
	Override     bool    `json:"override"`
	Outcome      string  `json:"outcome"`
	RetryAfterMs int64   `json:"retry_after_ms"`
	ProactiveMs  int64   `json:"proactive_ms"`
	Ms           int64   `json:"ms"`
}

func traceState(t *testing.T, s string) cooldownv1.State {
	t.Helper()
	switch s {
	case "closed":
		return cooldownv1.State_STATE_CLOSED
	case "open":
		return cooldownv1.State_STATE_OPEN
	case "half_open":
		return cooldownv1.State_STATE_HALF_OPEN
	}
	t.Fatalf("unknown state %q", s)
	return 0
}

func traceDecision(t *testing.T, s string) Decision {
	t.Helper()
	for d := DecisionAllow; d <= DecisionDeny; d++ {
		if d.String() == s {
			return d
		}
	}
	t.Fatalf("unknown decision %q", s)
	return 0
}

func traceOutcome(t *testing.T, s string) Outcome {
	t.Helper()
	for o := OutcomeSuccess; o <= OutcomeCanceled; o++ {
		if o.String() == s {
			return o
		}
	}
	t.Fatalf("unknown outcome %q", s)
	return 0
}

// TestMirrorTrace replays every case of testdata/mirror.json against the
// mirror, with the client's degradation as the client hands it over
// (outage when it degrades, degraded on each admit).
func TestMirrorTrace(t *testing.T) {
	t.Parallel()
	tr := readFixture[mirrorTrace](t, "mirror.json")
	require.NotEmpty(t, tr.Cases)
	for _, tc := range tr.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			m := newMirror(nil, time.Hour)
			now := time.Unix(1_700_000_000, 0)
			degraded := false
			tickets := map[string]mirrorTicket{}
			conns := map[string]Conn{}
			connOf := func(name string) Conn {
				if name == "" {
					name = "a"
				}
				if c, ok := conns[name]; ok {
					return c
				}
				c := NewConn(ID{byte(len(conns) + 1)}, name)
				conns[name] = c
				return c
			}
			for i, s := range tc.Steps {
				cn := connOf(s.Conn)
				switch s.Do {
				case "live":
					m.up()
				case "down":
					m.down()
				case "degrade":
					degraded = true
					m.outage()
				case "recover":
					degraded = false
				case "advance":
					now = now.Add(time.Duration(s.Ms) * time.Millisecond)
				case "admit":
					a, tk, ok := m.admit(cn, s.Retry, degraded, now)
					switch s.Want {
					case "mirrored":
						require.True(t, ok, "step %d: admitted from the mirror", i)
						require.Equal(t, s.Revision, a.Revision, "step %d: under the mirrored revision", i)
						require.True(t, a.Mirrored, "step %d", i)
					case "sent":
						require.False(t, ok, "step %d: asked of cooldownd", i)
						if s.Ticket != "" {
							tickets[s.Ticket] = tk
						}
					default:
						t.Fatalf("step %d: unknown want %q", i, s.Want)
					}
				case "admit_answer":
					tk, ok := tickets[s.Ticket]
					require.True(t, ok, "step %d: ticket %q taken", i, s.Ticket)
					a := Admission{Conn: cn, Decision: traceDecision(t, s.Decision), Revision: s.Revision}
					if s.Shadowed {
						a.Shadowed = ReasonThrottled
					}
					m.learn(a, traceState(t, s.State), s.Throttle, tk, now)
				case "report":
					m.reported(cn, s.Revision, Classification{Outcome: traceOutcome(t, s.Outcome),
						RetryAfter: time.Duration(s.RetryAfterMs) * time.Millisecond,
						Proactive:  time.Duration(s.ProactiveMs) * time.Millisecond})
				case "report_answer":
					m.reportAnswer(cn, &cooldownv1.ReportResponse{State: traceState(t, s.State), Revision: s.Revision,
						ThrottleProbability: s.Throttle})
				case "event":
					st := &cooldownv1.ConnectionState{Connection: wireConn(cn), State: traceState(t, s.State),
						Revision: s.Revision, Fleet: &cooldownv1.FleetCounts{ThrottleProbability: s.Throttle}}
					if s.Override {
						st.Override = cooldownv1.Override_OVERRIDE_FORCED_OPEN
					}
					m.event(st, now)
				default:
					t.Fatalf("step %d: unknown step %q", i, s.Do)
				}
			}
		})
	}
}
