package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/test/chaos/history"
)

// workerConfig is what the controller sends a worker on its stdin.
type workerConfig struct {
	Index      int           `json:"index"`
	Endpoints  string        `json:"endpoints"` // comma-separated replica URLs
	Hot        []string      `json:"hot"`       // connection ids, hex
	Cold       []string      `json:"cold"`
	Until      time.Time     `json:"until"`
	Goroutines int           `json:"goroutines"`
	Out        string        `json:"out"` // history file
	Fault      string        `json:"fault"`
	Pace       time.Duration `json:"pace"` // pause between a goroutine's calls
	LeaseTTL   time.Duration `json:"lease_ttl"`
}

// workerSummary is what a worker prints last on its stdout.
type workerSummary struct {
	Calls    int64            `json:"calls"`    // application calls (guarded)
	Provider int64            `json:"provider"` // of which reached the provider
	Fallback int64            `json:"fallback"` // of which got the configured fallback decision (a denial)
	Errors   map[string]int64 `json:"errors"`   // of which failed otherwise, by kind (must be none)
	Watch    int64            `json:"watch"`    // watch events received
	Stats    client.Stats     `json:"stats"`
}

// provider is an in-worker LLM provider whose answers follow a timeline
// per connection: hot connections fail in waves, so their breakers trip,
// cool down and probe; cold ones fail now and then.
type provider struct{ hot map[string]bool }

func (p provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("X-Conn")
	h := fnv.New32a()
	_, _ = io.WriteString(h, key)
	now := time.Now().UnixMilli()
	phase := (now/1500 + int64(h.Sum32())) % 6
	switch {
	case p.hot[key] && phase == 0:
		w.WriteHeader(http.StatusInternalServerError)
	case p.hot[key] && phase == 3:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	case !p.hot[key] && rand.IntN(20) == 0:
		w.WriteHeader(http.StatusBadGateway)
	default:
		_, _ = io.WriteString(w, "ok")
	}
}

// workerMain runs one client process: it reads its config on stdin,
// drives traffic until the deadline, and prints "PROBE <conn>" when it
// holds a probe lease, "DEG 0|1 <unix ms>" when its client degrades or
// recovers, and a JSON summary last.
func workerMain() error {
	var cfg workerConfig
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	hw, err := history.Create(cfg.Out)
	if err != nil {
		return err
	}
	defer func() { _ = hw.Close() }()

	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	rec := &recorder{base: &http.Transport{Protocols: &h2c, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext},
		process: cfg.Index, fault: cfg.Fault, ttl: cfg.LeaseTTL, w: hw}
	hc := &http.Client{Transport: rec}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := client.New(cfg.Endpoints, client.WithHTTPClient(hc), client.WithLogger(log), client.WithNoWait(),
		client.WithMaxRetries(1), client.WithBackoff(20*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()

	prov := provider{hot: map[string]bool{}}
	for _, k := range cfg.Hot {
		prov.hot[k] = true
	}
	ps := &http.Server{Handler: prov, ReadHeaderTimeout: time.Second}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = ps.Serve(pl) }()
	defer func() { _ = ps.Close() }()
	provURL := "http://" + pl.Addr().String()

	conns := func(ids []string) []client.Conn {
		out := make([]client.Conn, len(ids))
		for i, s := range ids {
			id, err := client.ParseID(s)
			if err != nil {
				panic(err)
			}
			out[i] = client.NewConn(id, fmt.Sprintf("chaos %d", i))
		}
		return out
	}
	hot, cold := conns(cfg.Hot), conns(cfg.Cold)
	ctx, cancel := context.WithDeadline(context.Background(), cfg.Until)
	defer cancel()

	sum := workerSummary{Errors: map[string]int64{}}
	var sumMu sync.Mutex
	count := func(f func(*workerSummary)) { sumMu.Lock(); f(&sum); sumMu.Unlock() }

	var wg sync.WaitGroup
	wg.Go(func() { watchDegraded(ctx, c, say) })
	wg.Go(func() { watchEvents(ctx, cfg.Endpoints, &sum.Watch) })
	api := cooldownv1connect.NewCooldownServiceClient(hc, firstEndpoint(cfg.Endpoints))
	for g := range cfg.Goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(cfg.Index), uint64(g)))
			for ctx.Err() == nil {
				conn := cold[r.IntN(len(cold))]
				if r.IntN(10) < 7 {
					conn = hot[r.IntN(len(hot))]
				}
				switch n := r.IntN(100); {
				case n < 60:
					guarded(ctx, c, conn, provURL, count, func() { say("PROBE %s", conn.ID()) })
				case n < 88:
					manual(ctx, c, conn, r, func() { say("PROBE %s", conn.ID()) })
				default:
					rctx, rcancel := context.WithTimeout(ctx, 250*time.Millisecond)
					_, _ = api.GetConnection(rctx, connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: conn.ID().Bytes()}))
					rcancel()
				}
				sleepJitter(ctx, cfg.Pace, r)
			}
		})
	}
	wg.Wait()
	fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = c.Flush(fctx)
	fcancel()
	sum.Stats = c.Stats()
	b, _ := json.Marshal(sum)
	say("SUMMARY %s", b)
	return nil
}

func firstEndpoint(list string) string {
	first, _, _ := strings.Cut(list, ",")
	return first
}

func sleepJitter(ctx context.Context, d time.Duration, r *rand.Rand) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d/2 + time.Duration(r.Int64N(int64(d))))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// guarded makes one application call through the guard and counts where
// it went: to the provider, or to its fallback decision (a denial).
func guarded(ctx context.Context, c *client.Client, conn client.Conn, url string, count func(func(*workerSummary)), onProbe func()) {
	var reached bool
	resp, err := c.Do(ctx, conn, func(ctx context.Context) (*http.Response, error) {
		if a, ok := client.AdmissionFrom(ctx); ok && a.Decision == client.DecisionAllowProbe {
			onProbe()
		}
		reached = true
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		req.Header.Set("X-Conn", conn.ID().String())
		return http.DefaultClient.Do(req)
	})
	if resp != nil {
		_ = resp.Body.Close()
	}
	var pe *client.Error
	count(func(s *workerSummary) {
		s.Calls++
		switch {
		case reached && (err == nil || errors.As(err, &pe)):
			s.Provider++
		case errors.Is(err, client.ErrDenied):
			s.Fallback++
		case ctx.Err() != nil:
			s.Calls-- // the run ended under it
		default:
			s.Errors[fmt.Sprintf("%T", err)]++
		}
	})
}

// manual admits, and when allowed reports a random outcome after a
// while, sometimes extending a probe's lease first and sometimes never
// reporting at all (the lease must then expire by its TTL).
func manual(ctx context.Context, c *client.Client, conn client.Conn, r *rand.Rand, onProbe func()) {
	a, err := c.Admit(ctx, conn)
	if err != nil || !a.Allowed() || a.Local {
		if err == nil && a.Allowed() {
			_ = c.Report(ctx, a, client.Classification{Outcome: client.OutcomeSuccess})
		}
		return
	}
	if a.Decision == client.DecisionAllowProbe {
		onProbe()
		sleepJitter(ctx, 150*time.Millisecond, r)
		if r.IntN(3) == 0 {
			_, _ = c.ExtendLease(ctx, a, 0)
		}
		if r.IntN(8) == 0 {
			return // abandoned: the lease lapses
		}
	}
	cl := client.Classification{Outcome: []client.Outcome{client.OutcomeSuccess, client.OutcomeSuccess,
		client.OutcomeTransientFailure, client.OutcomeTransientFailure, client.OutcomeCanceled, client.OutcomeRateLimited,
		client.OutcomeClientError}[r.IntN(7)]}
	if cl.Outcome == client.OutcomeRateLimited {
		cl.RetryAfter = 400 * time.Millisecond
	}
	_ = c.Report(ctx, a, cl)
}

// watchDegraded prints the client's degradations and recoveries.
func watchDegraded(ctx context.Context, c *client.Client, say func(string, ...any)) {
	was := false
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if d := c.Degraded(); d != was {
			was = d
			v := 0
			if d {
				v = 1
			}
			say("DEG %d %d", v, time.Now().UnixMilli())
		}
	}
}

// watchEvents keeps a WatchConnections stream open, reconnecting when it
// ends, and counts the events.
func watchEvents(ctx context.Context, endpoints string, n *int64) {
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &h2c}}
	api := cooldownv1connect.NewCooldownServiceClient(hc, firstEndpoint(endpoints), connect.WithGRPC())
	for ctx.Err() == nil {
		st, err := api.WatchConnections(ctx, connect.NewRequest(&cooldownv1.WatchConnectionsRequest{}))
		if err == nil {
			for st.Receive() {
				atomic.AddInt64(n, 1)
			}
			_ = st.Close()
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}
