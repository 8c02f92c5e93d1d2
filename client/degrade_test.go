package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// isRPC reports whether r calls the CooldownService method m.
func isRPC(r *http.Request, m string) bool {
	return strings.HasSuffix(r.URL.Path, "/cooldown.v1.CooldownService/"+m)
}

// unavailable answers like a replica whose Redis is down.
func unavailable(w http.ResponseWriter, _ *http.Request) bool {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"code":"unavailable","message":"state store unavailable"}`))
	return true
}

// TestOneSlowCallStaysWithTheFleet reproduces the flip of issue 11: one
// Admit slower than the admit timeout used to put every goroutine of the
// process into local mode for a second. Now that one call alone is decided
// in-process and every other call of the process goes through cooldownd.
func TestOneSlowCallStaysWithTheFleet(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	var slowed atomic.Bool
	var admits, reports atomic.Int64
	cd.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		switch {
		case isRPC(r, "Admit"):
			admits.Add(1)
			if slowed.CompareAndSwap(false, true) {
				<-r.Context().Done() // slower than the client waits
				return true
			}
		case isRPC(r, "Report"):
			reports.Add(1)
		}
		return false
	})
	prov := newProvider(t)
	// Without the mirror: every call asks cooldownd and every report goes at
	// once, which is what this test counts.
	c := newClient(t, cd.URL, WithAdmitTimeout(3*time.Second), WithoutMirror()) // the others answer well within it, even loaded
	cn := conn(t, c, prov.URL, "key-slow", "")
	const workers, calls = 10, 20
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range calls {
				resp, err := c.Do(t.Context(), cn, prov.get())
				if assert.NoError(t, err) {
					_ = resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, c.Flush(t.Context()))
	st := c.Stats()
	assert.Equal(t, uint64(1), st.LocalDecisions, "only the slow call is decided in-process")
	assert.Zero(t, st.Degradations)
	assert.False(t, c.Degraded())
	assert.Equal(t, int64(workers*calls), admits.Load())
	// Every call the server admitted is reported to it: once, or — a
	// report whose answer came too late on a loaded machine — once more
	// from the queue.
	assert.Equal(t, st.Reports.Queued, st.Reports.Delivered, "the queue delivered what it queued")
	assert.GreaterOrEqual(t, reports.Load(), int64(workers*calls-1), "every call the server admitted is reported to it")
	assert.LessOrEqual(t, reports.Load(), int64(workers*calls-1)+int64(st.Reports.Queued))
}

// TestGrantedProbeSettledAfterOutage reproduces the stranded lease of
// issue 11: a probe cooldownd granted, reported while cooldownd does not
// answer, used to be settled only in-process, so every other process was
// denied PROBE_IN_FLIGHT for the whole lease TTL (30 s). Now the report is
// queued and delivered once cooldownd answers, and the connection closes.
func TestGrantedProbeSettledAfterOutage(t *testing.T) {
	t.Parallel()
	for _, degradeFirst := range []bool{false, true} {
		name := "report fails"
		if degradeFirst {
			name = "client already degraded"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cd := startCooldownd(t, fastPolicy()) // lease TTL: the default 30 s
			c := newClient(t, cd.URL, WithServiceRetry(time.Hour))
			t.Cleanup(func() { _ = c.Close() })
			cn := conn(t, c, "https://api.example.com/v1", "key-probe", "")
			other := conn(t, c, "https://api.example.com/v1", "key-other", "")
			ctx := t.Context()
			for range 2 { // fastPolicy trips after 2 failures
				a, err := c.Admit(ctx, cn)
				require.NoError(t, err)
				require.NoError(t, c.Report(ctx, a, Classification{Outcome: OutcomeTransientFailure}))
			}
			var probe Admission
			require.Eventually(t, func() bool {
				a, err := c.Admit(ctx, cn)
				probe = a
				return err == nil && a.Decision == DecisionAllowProbe
			}, 5*time.Second, 10*time.Millisecond, "the open period ends and a probe is granted")

			cd.SetIntercept(unavailable)
			if degradeFirst {
				for range DefaultDegradeAfter {
					_, err := c.Admit(ctx, other)
					require.NoError(t, err)
				}
				require.True(t, c.Degraded())
			}
			require.NoError(t, c.Report(ctx, probe, Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}))
			assert.Equal(t, 1, c.Stats().Reports.Len+int(c.Stats().Reports.Delivered), "the probe's report is queued")

			cd.SetIntercept(nil)
			start := time.Now()
			require.NoError(t, c.Flush(ctx))
			assert.Less(t, time.Since(start), 10*time.Second, "settled long before the 30 s lease TTL")
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, cd.get(t, cn).GetConnection().GetState(), "the probe's success closed the connection for everyone")
			assert.Equal(t, uint64(1), c.Stats().Reports.Delivered)
			a, err := newClient(t, cd.URL).Admit(ctx, cn)
			require.NoError(t, err)
			assert.Equal(t, DecisionAllow, a.Decision)
		})
	}
}

// TestLocalOutcomesReachTheFleet: what a process saw while it decided
// in-process (here a 429 with Retry-After) reaches cooldownd when it
// answers again, so another process is denied without calling.
func TestLocalOutcomesReachTheFleet(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	cd.SetIntercept(unavailable)
	prov := newProvider(t, reply{status: 429, headers: map[string]string{"Retry-After": "20"}})
	c := newClient(t, cd.URL, WithMaxRetries(0), WithNoWait())
	t.Cleanup(func() { _ = c.Close() })
	cn := conn(t, c, prov.URL, "key-429", "")
	_, err := c.Do(t.Context(), cn, prov.get())
	var pe *Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, OutcomeRateLimited, pe.LastOutcome)
	assert.Equal(t, uint64(1), c.Stats().LocalDecisions)

	cd.SetIntercept(nil)
	require.NoError(t, c.Flush(t.Context()))
	fresh := newClient(t, cd.URL)
	a, err := fresh.Admit(t.Context(), cn)
	require.NoError(t, err)
	assert.Equal(t, DecisionDeny, a.Decision)
	assert.Equal(t, ReasonCooldown, a.Reason)
	assert.Greater(t, a.RetryAfter, 15*time.Second)
	assert.LessOrEqual(t, a.RetryAfter, 20*time.Second, "a late report never lengthens the provider's cooldown")
	assert.Equal(t, int64(1), prov.hits.Load())
}

// refusing is a cooldownd that refuses every call with one code.
type refusing struct {
	cooldownv1connect.UnimplementedCooldownServiceHandler
	code connect.Code
}

func (r refusing) Admit(context.Context, *connect.Request[cooldownv1.AdmitRequest]) (*connect.Response[cooldownv1.AdmitResponse], error) {
	return nil, connect.NewError(r.code, errors.New("refused"))
}

func (r refusing) Report(context.Context, *connect.Request[cooldownv1.ReportRequest]) (*connect.Response[cooldownv1.ReportResponse], error) {
	return nil, connect.NewError(r.code, errors.New("refused"))
}

// TestRefusalsNeverFailOpen: configuration and caller errors are typed
// errors, in either fail mode; the provider is never called and the
// client never degrades.
func TestRefusalsNeverFailOpen(t *testing.T) {
	t.Parallel()
	for _, code := range []connect.Code{connect.CodeUnauthenticated, connect.CodePermissionDenied,
		connect.CodeInvalidArgument, connect.CodeFailedPrecondition} {
		for _, mode := range []FailMode{FailOpen, FailClosed} {
			t.Run(code.String()+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				_, h := cooldownv1connect.NewCooldownServiceHandler(refusing{code: code})
				srv := httptest.NewUnstartedServer(h)
				var p http.Protocols
				p.SetHTTP1(true)
				p.SetUnencryptedHTTP2(true)
				srv.Config.Protocols = &p
				srv.Start()
				t.Cleanup(srv.Close)
				prov := newProvider(t)
				c := newClient(t, srv.URL, WithFailMode(mode))
				cn := conn(t, c, prov.URL, "key", "")
				for range 2 * DefaultDegradeAfter {
					_, err := c.Admit(t.Context(), cn)
					var re *RejectedError
					require.ErrorAs(t, err, &re)
					assert.Equal(t, code, re.Code)
					assert.Equal(t, code, connect.CodeOf(err))
					assert.ErrorIs(t, err, ErrRejected)
					assert.NotErrorIs(t, err, ErrUnavailable)

					_, err = c.Do(t.Context(), cn, prov.get())
					require.ErrorIs(t, err, ErrRejected)
					err = c.Report(t.Context(), Admission{Conn: cn, Revision: 1}, Classification{Outcome: OutcomeSuccess})
					require.ErrorIs(t, err, ErrRejected)
				}
				assert.Zero(t, prov.hits.Load(), "a refused call never goes to the provider")
				st := c.Stats()
				assert.False(t, st.Degraded)
				assert.Zero(t, st.LocalDecisions)
				assert.Zero(t, st.Reports.Queued, "a refused report is not queued")
			})
		}
	}
}

// TestEndpointsFailover: with two replicas, one dead replica never sends
// a call in-process; both dead degrade the client; one back recovers it.
func TestEndpointsFailover(t *testing.T) {
	t.Parallel()
	a := startCooldownd(t, fastPolicy())
	b := a.replica(t)
	prov := newProvider(t)
	// Without the mirror: this counts the calls no replica answered, and a
	// mirrored call asks none (it would be admitted until the stream ends).
	c := newClient(t, a.URL+", "+b.URL, WithServiceRetry(10*time.Millisecond), WithoutMirror())
	cn := conn(t, c, prov.URL, "key-ha", "")
	do := func(n int) {
		t.Helper()
		for range n {
			resp, err := c.Do(t.Context(), cn, prov.get())
			require.NoError(t, err)
			_ = resp.Body.Close()
		}
	}
	do(5)
	for _, dead := range []*cooldownd{a, b} {
		dead.Stop()
		do(10)
		assert.Zero(t, c.Stats().LocalDecisions, "the other replica decides")
		assert.False(t, c.Degraded())
		dead.restart(t)
	}
	a.Stop()
	b.Stop()
	do(DefaultDegradeAfter)
	assert.True(t, c.Degraded(), "no replica answers")
	assert.Equal(t, uint64(DefaultDegradeAfter), c.Stats().LocalDecisions)
	b.restart(t)
	require.Eventually(t, func() bool { do(1); return !c.Degraded() }, 5*time.Second, 20*time.Millisecond)
}
