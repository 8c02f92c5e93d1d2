package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// op is one measured operation by worker w.
type op func(ctx context.Context, w int) error

// sample is what one phase measured on the client side.
type sample struct {
	n    int64
	errs int64
	err  error // the first error
	dur  time.Duration
	lat  []time.Duration // sorted
}

func (s sample) rate() float64 { return float64(s.n) / s.dur.Seconds() }

func (s sample) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	i := int(p * float64(len(s.lat)))
	return s.lat[min(i, len(s.lat)-1)]
}

// drive runs f on c workers for warm (unmeasured), then for d, and returns
// the measured part.
// start and end run as the measured part begins and ends.
func drive(ctx context.Context, c int, warm, d time.Duration, f op, start, end func()) sample {
	var (
		wg       sync.WaitGroup
		measure  atomic.Bool
		stop     atomic.Bool
		errs     atomic.Int64
		firstErr atomic.Value
		lats     = make([][]time.Duration, c)
	)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, 4096)
			for !stop.Load() {
				m := measure.Load()
				t0 := time.Now()
				err := f(ctx, w)
				el := time.Since(t0)
				if !m || !measure.Load() {
					continue
				}
				if err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err)
					}
					continue
				}
				l = append(l, el)
			}
			lats[w] = l
		}()
	}
	time.Sleep(warm)
	start()
	measure.Store(true)
	t0 := time.Now()
	time.Sleep(d)
	measure.Store(false)
	el := time.Since(t0)
	end()
	stop.Store(true)
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	s := sample{n: int64(len(all)), errs: errs.Load(), dur: el, lat: all}
	if e, ok := firstErr.Load().(error); ok {
		s.err = e
	}
	return s
}

// connID is the 32-byte id of the bench's connection name.
func connID(name string) []byte {
	h := sha256.Sum256([]byte("cooldownd-bench/" + name))
	return h[:]
}

func conn(name string) *cooldownv1.Connection {
	return &cooldownv1.Connection{Id: connID(name), Label: "bench " + name}
}

// protocols are the wire protocols measured, by name: the codec and
// protocol of the Connect client, and its transport.
var protocols = []protocol{
	{"connect", nil, false},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}, false},
	{"json", []connect.ClientOption{connect.WithProtoJSON()}, false},
	{"connect-h1", nil, true},
	{"json-h1", []connect.ClientOption{connect.WithProtoJSON()}, true},
}

type protocol struct {
	name string
	opts []connect.ClientOption
	// h1: HTTP/1.1, a keep-alive TCP connection per worker; otherwise one
	// h2c connection shared by every worker, as the Go client uses.
	h1 bool
}

// httpClient is the transport of protocol p for up to workers workers.
func (p protocol) httpClient(workers int) *http.Client {
	if !p.h1 {
		return h2c()
	}
	var ps http.Protocols
	ps.SetHTTP1(true)
	return &http.Client{Transport: &http.Transport{Protocols: &ps, MaxIdleConnsPerHost: workers + 8, MaxIdleConns: workers + 8}}
}

// h2c is an HTTP/2 client with prior knowledge, as the Go client speaks to
// an http:// cooldownd.
func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p, MaxIdleConnsPerHost: 64}}
}

// rpcOps are the RPC phases against one cooldownd client. Worker w uses
// its own connection "w<w>" (healthy, closed); the 3-candidate Admit asks
// for "cool-a", "cool-b" (both cooling down for an hour) and then w's own.
type rpcOps struct {
	cl   cooldownv1connect.CooldownServiceClient
	revs []atomic.Uint64
	self []*cooldownv1.Connection
	cool []*cooldownv1.Connection
}

func newRPCOps(ctx context.Context, cl cooldownv1connect.CooldownServiceClient, workers int, prefix string) (*rpcOps, error) {
	o := &rpcOps{cl: cl, revs: make([]atomic.Uint64, workers)}
	for w := range workers {
		o.self = append(o.self, conn(fmt.Sprintf("%sw%d", prefix, w)))
	}
	for _, n := range []string{"cool-a", "cool-b"} {
		c := conn(prefix + n)
		o.cool = append(o.cool, c)
		// A rate limit with a one-hour Retry-After: DENY COOLDOWN for the run.
		if _, err := cl.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: c,
			Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: durationpb.New(time.Hour), HttpStatus: 429})); err != nil {
			return nil, fmt.Errorf("set up cooling connections: %w", err)
		}
	}
	// Every worker's connection exists (registered, state created) before
	// anything is measured.
	for w := range workers {
		if err := o.admitReport(ctx, w); err != nil {
			return nil, fmt.Errorf("set up connections: %w", err)
		}
	}
	return o, nil
}

func (o *rpcOps) admit(ctx context.Context, w int) error {
	r, err := o.cl.Admit(ctx, connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: o.self[w : w+1]}))
	if err != nil {
		return err
	}
	if r.Msg.GetDecision() != cooldownv1.Decision_DECISION_ALLOW {
		return fmt.Errorf("admit: %v %v", r.Msg.GetDecision(), r.Msg.GetDenyReason())
	}
	o.revs[w].Store(r.Msg.GetRevision())
	return nil
}

func (o *rpcOps) report(ctx context.Context, w int) error {
	_, err := o.cl.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: o.self[w],
		Revision: o.revs[w].Load(), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200}))
	return err
}

func (o *rpcOps) admitReport(ctx context.Context, w int) error {
	if err := o.admit(ctx, w); err != nil {
		return err
	}
	return o.report(ctx, w)
}

func (o *rpcOps) admit3(ctx context.Context, w int) error {
	r, err := o.cl.Admit(ctx, connect.NewRequest(&cooldownv1.AdmitRequest{
		Candidates: []*cooldownv1.Connection{o.cool[0], o.cool[1], o.self[w]}}))
	if err != nil {
		return err
	}
	if r.Msg.GetCandidateIndex() != 2 || r.Msg.GetDecision() != cooldownv1.Decision_DECISION_ALLOW {
		return fmt.Errorf("admit3: candidate %d %v", r.Msg.GetCandidateIndex(), r.Msg.GetDecision())
	}
	return nil
}
