package client

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
)

// fakeService is an in-memory cooldownd on the breaker model and the
// process clock, for tests under testing/synctest, where the real server's
// Redis (a network peer) cannot run. It serves without a network through
// [memClient], or on loopback with [fakeService.serve] (for the mirror's
// watch stream). It runs the fleet rules of its policy (retry budget,
// throttle, trip quorum, shadow) as the model does, records every request,
// and lets a test rewrite its answers.
type fakeService struct {
	cooldownv1connect.UnimplementedCooldownServiceHandler
	l       *local
	admits  atomic.Int64
	reports atomic.Int64
	down    atomic.Bool // answer unavailable

	mu        sync.Mutex
	admitReqs []*cooldownv1.AdmitRequest
	reportReq []*cooldownv1.ReportRequest
	onAdmit   func(*cooldownv1.AdmitRequest, *cooldownv1.AdmitResponse)
	onReport  func(*cooldownv1.ReportRequest, *cooldownv1.ReportResponse)
	events    chan *cooldownv1.ConnectionState
	watchErr  error // WatchConnections answers it (an older cooldownd, a token that may not watch)
	watches   int   // WatchConnections calls received
}

func newFakeService(p breaker.Policy) *fakeService {
	cfg := defaultConfig()
	cfg.policy = p
	f := &fakeService{l: newLocal(cfg, slog.New(slog.DiscardHandler)), events: make(chan *cooldownv1.ConnectionState, 16)}
	f.l.policy = p // the fake is the fleet: its trip quorum applies
	return f
}

// answerAdmit sets a hook that may rewrite each Admit answer.
func (f *fakeService) answerAdmit(h func(*cooldownv1.AdmitRequest, *cooldownv1.AdmitResponse)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onAdmit = h
}

// answerReport sets a hook that may rewrite each Report answer.
func (f *fakeService) answerReport(h func(*cooldownv1.ReportRequest, *cooldownv1.ReportResponse)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onReport = h
}

// admitRequests returns copies of the Admit requests received.
func (f *fakeService) admitRequests() []*cooldownv1.AdmitRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*cooldownv1.AdmitRequest, len(f.admitReqs))
	for i, r := range f.admitReqs {
		out[i] = proto.CloneOf(r)
	}
	return out
}

// reportRequests returns copies of the Report requests received.
func (f *fakeService) reportRequests() []*cooldownv1.ReportRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*cooldownv1.ReportRequest, len(f.reportReq))
	for i, r := range f.reportReq {
		out[i] = proto.CloneOf(r)
	}
	return out
}

func (f *fakeService) conns(in []*cooldownv1.Connection) ([]Conn, error) {
	out := make([]Conn, len(in))
	for i, c := range in {
		id, err := idFromBytes(c.GetId())
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		out[i] = NewConn(id, c.GetLabel())
	}
	return out, nil
}

// wireState is the wire state of a breaker state.
func wireState(s *breaker.State) cooldownv1.State {
	switch s.Phase {
	case breaker.Open:
		return cooldownv1.State_STATE_OPEN
	case breaker.HalfOpen:
		return cooldownv1.State_STATE_HALF_OPEN
	}
	return cooldownv1.State_STATE_CLOSED
}

// throttle returns the throttle probability and wire state of id now.
func (f *fakeService) throttle(id ID, now time.Time) (float64, cooldownv1.State) {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	s := f.l.state(id)
	return s.ThrottleProbability(f.l.policy, now.UnixMilli()), wireState(s)
}

func (f *fakeService) Admit(_ context.Context, req *connect.Request[cooldownv1.AdmitRequest]) (*connect.Response[cooldownv1.AdmitResponse], error) {
	f.admits.Add(1)
	f.mu.Lock()
	f.admitReqs = append(f.admitReqs, proto.CloneOf(req.Msg))
	hook := f.onAdmit
	f.mu.Unlock()
	if f.down.Load() {
		return nil, connect.NewError(connect.CodeUnavailable, nil)
	}
	cands, err := f.conns(req.Msg.GetCandidates())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	a := f.l.admit(now, cands, req.Msg.GetRetry())
	out := &cooldownv1.AdmitResponse{
		Decision: cooldownv1.Decision(a.Decision), CandidateIndex: uint32(a.Index), Revision: a.Revision,
		LeaseToken: a.LeaseToken, DenyReason: cooldownv1.DenyReason(a.Reason),
		ShadowDenyReason: cooldownv1.DenyReason(a.Shadowed),
	}
	out.ThrottleProbability, out.State = f.throttle(a.Conn.id, now)
	if a.Shadowed != ReasonNone {
		out.ShadowRetryAfter = durationpb.New(a.ShadowRetryAfter)
	}
	if a.Decision == DecisionDeny {
		out.RetryAfter = durationpb.New(a.RetryAfter)
	}
	if !a.LeaseExpires.IsZero() {
		out.LeaseExpiresAt = timestamppb.New(a.LeaseExpires)
	}
	out.Candidates = make([]*cooldownv1.CandidateDecision, a.Index+1)
	for i := range out.Candidates {
		out.Candidates[i] = &cooldownv1.CandidateDecision{Decision: cooldownv1.Decision_DECISION_DENY}
	}
	out.Candidates[a.Index] = &cooldownv1.CandidateDecision{Decision: out.Decision, DenyReason: out.DenyReason,
		RetryAfter: out.RetryAfter, State: out.State, Revision: out.Revision, ShadowDenyReason: out.ShadowDenyReason}
	if hook != nil {
		hook(req.Msg, out)
	}
	return connect.NewResponse(out), nil
}

func (f *fakeService) Report(_ context.Context, req *connect.Request[cooldownv1.ReportRequest]) (*connect.Response[cooldownv1.ReportResponse], error) {
	f.reports.Add(1)
	f.mu.Lock()
	f.reportReq = append(f.reportReq, proto.CloneOf(req.Msg))
	hook := f.onReport
	f.mu.Unlock()
	if f.down.Load() {
		return nil, connect.NewError(connect.CodeUnavailable, nil)
	}
	cs, err := f.conns([]*cooldownv1.Connection{req.Msg.GetConnection()})
	if err != nil {
		return nil, err
	}
	m, now := req.Msg, time.Now()
	f.l.mu.Lock()
	s := f.l.state(cs[0].id)
	res, _ := s.Report(f.l.policy, now.UnixMilli(), breaker.Report{
		Revision: m.GetRevision(), LeaseToken: m.GetLeaseToken(), Outcome: breaker.Outcome(m.GetOutcome()),
		RetryAfter: m.GetRetryAfter().AsDuration().Milliseconds(), HTTPStatus: int(m.GetHttpStatus()),
		ErrorCode: m.GetErrorCode(), Count: int64(m.GetCount()), Retry: m.GetRetry(), Reporter: m.GetReporter(),
	}, 0.5)
	out := &cooldownv1.ReportResponse{State: wireState(s), Revision: s.Revision, Accepted: res.Accepted, Changed: res.Changed,
		ThrottleProbability: s.ThrottleProbability(f.l.policy, now.UnixMilli()), Shadow: f.l.policy.Shadow}
	f.l.mu.Unlock()
	if hook != nil {
		hook(req.Msg, out)
	}
	return connect.NewResponse(out), nil
}

// WatchConnections sends a heartbeat, then the states pushed with event,
// until the client goes.
func (f *fakeService) WatchConnections(ctx context.Context, _ *connect.Request[cooldownv1.WatchConnectionsRequest], stream *connect.ServerStream[cooldownv1.WatchConnectionsResponse]) error {
	f.mu.Lock()
	f.watches++
	refusal := f.watchErr
	f.mu.Unlock()
	if refusal != nil {
		return refusal
	}
	if err := stream.Send(&cooldownv1.WatchConnectionsResponse{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case st := <-f.events:
			if err := stream.Send(&cooldownv1.WatchConnectionsResponse{Connection: st}); err != nil {
				return err
			}
		}
	}
}

// refuseWatch makes WatchConnections answer err.
func (f *fakeService) refuseWatch(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchErr = err
}

// watchCalls returns how many WatchConnections calls came.
func (f *fakeService) watchCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches
}

// forget drops the requests recorded so far (a test's warm-up).
func (f *fakeService) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.admitReqs, f.reportReq = nil, nil
	f.admits.Store(0)
	f.reports.Store(0)
}

// event pushes a state change to the watch stream.
func (f *fakeService) event(st *cooldownv1.ConnectionState) { f.events <- st }

// memClient serves HTTP requests with a handler in memory.
type memClient struct{ h http.Handler }

func (m memClient) Do(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// client returns a Client without the mirror on an in-memory fake cooldownd, with the
// generous admit timeout of [newClient]: outside synctest the clock is
// real, and on a loaded machine a call past 250 ms is rightly decided
// in-process (TestAdmitAttempt failed so, once in 20). Tests about timeouts
// set their own.
func (f *fakeService) client(opts ...Option) (*Client, error) {
	_, h := cooldownv1connect.NewCooldownServiceHandler(f)
	// In memory nothing streams: the mirror would never be live, so these
	// are tests of the client without it, and they say so. The mirror's
	// tests use serve.
	base := []Option{WithHTTPClient(memClient{h}), WithLogger(slog.New(slog.DiscardHandler)), WithAdmitTimeout(10 * time.Second),
		WithoutMirror()}
	return New("http://cooldownd.invalid", append(base, opts...)...)
}

// serve serves the fake on loopback (streams need a real connection) and
// returns a Client on it, both closed at cleanup.
func (f *fakeService) serve(t *testing.T, opts ...Option) *Client {
	t.Helper()
	_, h := cooldownv1connect.NewCooldownServiceHandler(f)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, append([]Option{WithHTTPClient(srv.Client())}, opts...)...)
	return c
}
