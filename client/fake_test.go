package client

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// fakeService is an in-memory cooldownd on the breaker model and the
// process clock, for tests under testing/synctest, where the real server's
// Redis (a network peer) cannot run. It serves without a network through
// [memClient].
type fakeService struct {
	cooldownv1connect.UnimplementedCooldownServiceHandler
	l       *local
	admits  atomic.Int64
	reports atomic.Int64
	down    atomic.Bool // answer unavailable
}

func newFakeService(p breaker.Policy) *fakeService {
	cfg := defaultConfig()
	cfg.policy = p
	return &fakeService{l: newLocal(cfg, slog.New(slog.DiscardHandler))}
}

func (f *fakeService) conns(in []*cooldownv1.Connection) ([]Conn, error) {
	out := make([]Conn, len(in))
	for i, c := range in {
		id, err := keys.IDFromBytes(c.GetId())
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		out[i] = NewConn(id, c.GetLabel())
	}
	return out, nil
}

func (f *fakeService) Admit(_ context.Context, req *connect.Request[cooldownv1.AdmitRequest]) (*connect.Response[cooldownv1.AdmitResponse], error) {
	f.admits.Add(1)
	if f.down.Load() {
		return nil, connect.NewError(connect.CodeUnavailable, nil)
	}
	cands, err := f.conns(req.Msg.GetCandidates())
	if err != nil {
		return nil, err
	}
	a := f.l.admit(time.Now(), cands)
	out := &cooldownv1.AdmitResponse{
		Decision: cooldownv1.Decision(a.Decision), CandidateIndex: uint32(a.Index), Revision: a.Revision,
		LeaseToken: a.LeaseToken, DenyReason: cooldownv1.DenyReason(a.Reason),
	}
	if a.Decision == DecisionDeny {
		out.RetryAfter = durationpb.New(a.RetryAfter)
	}
	if !a.LeaseExpires.IsZero() {
		out.LeaseExpiresAt = timestamppb.New(a.LeaseExpires)
	}
	return connect.NewResponse(out), nil
}

func (f *fakeService) Report(_ context.Context, req *connect.Request[cooldownv1.ReportRequest]) (*connect.Response[cooldownv1.ReportResponse], error) {
	f.reports.Add(1)
	if f.down.Load() {
		return nil, connect.NewError(connect.CodeUnavailable, nil)
	}
	cs, err := f.conns([]*cooldownv1.Connection{req.Msg.GetConnection()})
	if err != nil {
		return nil, err
	}
	m := req.Msg
	res := f.l.report(time.Now(), Admission{Conn: cs[0], Revision: m.GetRevision(), LeaseToken: m.GetLeaseToken()},
		Classification{Outcome: Outcome(m.GetOutcome()), RetryAfter: m.GetRetryAfter().AsDuration(),
			HTTPStatus: int(m.GetHttpStatus()), ErrorCode: m.GetErrorCode()}, false)
	state := cooldownv1.State_STATE_CLOSED
	if res.open {
		state = cooldownv1.State_STATE_OPEN
	}
	return connect.NewResponse(&cooldownv1.ReportResponse{State: state}), nil
}

// memClient serves HTTP requests with a handler in memory.
type memClient struct{ h http.Handler }

func (m memClient) Do(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// fakeClient returns a Client on an in-memory fake cooldownd.
func (f *fakeService) client(opts ...Option) (*Client, error) {
	_, h := cooldownv1connect.NewCooldownServiceHandler(f)
	base := []Option{WithHTTPClient(memClient{h}), WithLogger(slog.New(slog.DiscardHandler))}
	return New("http://cooldownd.invalid", append(base, opts...)...)
}
