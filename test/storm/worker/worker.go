// Package worker is one client process of the storm harness: G goroutines
// that make user calls to the fake provider, guarded by one of three
// strategies, and record each call's outcome and latency.
package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/test/storm/fakeprovider"
)

// Strategy is how a worker coordinates its retries.
type Strategy string

// Strategies.
const (
	// NoCoordination retries on its own: the same retry rules as the
	// client's guard (max retries, jittered exponential backoff, at least
	// the provider's Retry-After), without any breaker.
	NoCoordination Strategy = "none"
	// Local uses the client's guard with only its in-process breaker: the
	// client points at an address where no cooldownd listens and fails
	// open, so every decision is local to the process.
	Local Strategy = "local"
	// Cooldownd uses the client's guard with cooldownd.
	Cooldownd Strategy = "cooldownd"
)

// Keys of the two connections a worker calls.
const (
	KeyPrimary  = "primary"
	KeyFallback = "fallback"
)

// Unreachable is the cooldownd URL of the [Local] strategy: nothing
// listens on port 1 of loopback, so connecting fails at once.
const Unreachable = "http://127.0.0.1:1"

// Config is everything a worker process runs with. The harness sends it
// as JSON on the worker's stdin.
type Config struct {
	ID             int           `json:"id"`
	Strategy       Strategy      `json:"strategy"`
	Cooldownd      string        `json:"cooldownd"` // base URL of the replica (Cooldownd)
	Provider       string        `json:"provider"`  // base URL of the fake provider
	RunID          string        `json:"run_id"`    // makes connection ids unique per run
	Goroutines     int           `json:"goroutines"`
	Fallback       bool          `json:"fallback"` // call [primary, fallback] with DoFallback
	Policy         client.Policy `json:"policy"`   // the local breaker's policy (= the server's)
	MaxRetries     int           `json:"max_retries"`
	BackoffBase    time.Duration `json:"backoff_base"`
	BackoffCap     time.Duration `json:"backoff_cap"`
	AdmitTimeout   time.Duration `json:"admit_timeout"`
	AttemptTimeout time.Duration `json:"attempt_timeout"` // bound of one provider request
	Deadline       time.Duration `json:"deadline"`        // bound of one user call
	Think          time.Duration `json:"think"`           // mean pause between a goroutine's calls
	Duration       time.Duration `json:"duration"`        // from the start: calls still running are cut
	Seed           uint64        `json:"seed"`
	// Logger receives the client's notices; nil discards them.
	Logger *slog.Logger `json:"-"`
}

// Call is one user call: what the application asked for, with every retry
// and wait inside it.
type Call struct {
	Goroutine int    `json:"g"`
	Start     int64  `json:"start"` // Unix nanoseconds
	End       int64  `json:"end"`
	OK        bool   `json:"ok"`
	Cut       bool   `json:"cut,omitempty"` // still running when the run ended; not counted
	Attempts  int    `json:"attempts"`      // provider requests made
	Key       string `json:"key,omitempty"` // the key that answered, when OK
	// Served is how long the successful provider request took; the rest
	// of End−Start is the latency the strategy added.
	Served time.Duration `json:"served,omitempty"`
	Err    string        `json:"err,omitempty"` // "denied:<reason>" or "failed:<outcome>"
}

// Added is the latency the strategy added to the call: all of it for a
// failed call, all but the successful request for one that succeeded.
func (c Call) Added() time.Duration { return time.Duration(c.End-c.Start) - c.Served }

// Result is what a worker reports at the end.
type Result struct {
	ID    int    `json:"id"`
	Calls []Call `json:"calls"`
	// LocalAdmissions counts calls the client's in-process breaker let go;
	// with [Cooldownd] they mean cooldownd did not answer in time.
	LocalAdmissions int64 `json:"local_admissions"`
	Probes          int64 `json:"probes"`
	// Wire is what the client said to cooldownd and heard back (the
	// guarded strategies; with [Local] every exchange fails).
	Wire Wire `json:"wire"`
}

// Conns derives the worker's two connections. The harness derives the
// same ids to read their state from cooldownd.
func Conns(c *client.Client, runID string) (primary, fallback client.Conn, err error) {
	primary, err = c.Connection("storm", "https://storm.invalid/v1", "storm-"+runID+"-"+KeyPrimary, "model", "storm primary")
	if err != nil {
		return primary, fallback, err
	}
	fallback, err = c.Connection("storm", "https://storm.invalid/v1", "storm-"+runID+"-"+KeyFallback, "model", "storm fallback")
	return primary, fallback, err
}

// Worker runs one worker process's goroutines.
type Worker struct {
	cfg               Config
	hc                *http.Client
	cl                *client.Client // nil for NoCoordination
	primary, fallback client.Conn
	rules             client.Rules
	wire              *observer
	locals, probes    atomic.Int64
}

// New checks cfg and builds the worker's clients.
func New(cfg Config) (*Worker, error) {
	switch {
	case cfg.Goroutines < 1:
		return nil, errors.New("worker: goroutines must be positive")
	case cfg.Provider == "":
		return nil, errors.New("worker: no provider URL")
	case cfg.AttemptTimeout <= 0 || cfg.Deadline <= 0 || cfg.Duration <= 0:
		return nil, errors.New("worker: attempt timeout, deadline and duration must be positive")
	}
	w := &Worker{cfg: cfg, rules: client.DefaultRules(), wire: newObserver(), hc: &http.Client{Transport: &http.Transport{
		MaxIdleConns: 4 * cfg.Goroutines, MaxIdleConnsPerHost: 4 * cfg.Goroutines,
		IdleConnTimeout: time.Minute, DisableCompression: true,
	}}}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	url := cfg.Cooldownd
	switch cfg.Strategy {
	case NoCoordination:
		url = Unreachable // only to derive the connection ids; never contacted
	case Local:
		url = Unreachable
	case Cooldownd:
		if url == "" {
			return nil, errors.New("worker: no cooldownd URL")
		}
	default:
		return nil, fmt.Errorf("worker: unknown strategy %q", cfg.Strategy)
	}
	cl, err := client.New(url,
		client.WithLocalPolicy(cfg.Policy), client.WithFailMode(client.FailOpen),
		client.WithMaxRetries(cfg.MaxRetries), client.WithBackoff(cfg.BackoffBase, cfg.BackoffCap),
		client.WithAdmitTimeout(cfg.AdmitTimeout), client.WithRules(w.rules), client.WithLogger(log),
		client.WithHTTPClient(w.wire),
		// The storm checks the fleet rules call by call (one probe in
		// flight, the lease): without the mirror, whose local admits
		// follow another process's trip one watch event later.
		client.WithoutMirror())
	if err != nil {
		return nil, err
	}
	if w.primary, w.fallback, err = Conns(cl, cfg.RunID); err != nil {
		return nil, err
	}
	if cfg.Strategy != NoCoordination {
		w.cl = cl
	}
	return w, nil
}

// Run makes user calls from start until start+Duration and returns them.
// Calls still running at the end are cut (their contexts canceled).
func (w *Worker) Run(ctx context.Context, start time.Time) Result {
	end := start.Add(w.cfg.Duration)
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	if err := sleepUntil(ctx, start); err != nil {
		return Result{ID: w.cfg.ID}
	}
	var (
		mu    sync.Mutex
		calls []Call
		wg    sync.WaitGroup
	)
	for g := range w.cfg.Goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.ID)<<16|uint64(g)))
			var mine []Call
			for {
				think := w.cfg.Think/2 + time.Duration(rng.Int64N(int64(w.cfg.Think)+1))
				if sleep(ctx, think) != nil {
					break
				}
				mine = append(mine, w.userCall(ctx, g, rng))
			}
			mu.Lock()
			calls = append(calls, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return Result{ID: w.cfg.ID, Calls: calls, LocalAdmissions: w.locals.Load(), Probes: w.probes.Load(), Wire: w.wire.snapshot()}
}

// userCall makes one user call, bounded by the deadline.
func (w *Worker) userCall(run context.Context, g int, rng *rand.Rand) Call {
	ctx, cancel := context.WithTimeout(run, w.cfg.Deadline)
	defer cancel()
	c := Call{Goroutine: g, Start: time.Now().UnixNano()}
	sent := make(map[string]int) // requests of this call per key: after the first, a retry there
	send := func(ctx context.Context, conn client.Conn) (*http.Response, error) {
		key := KeyPrimary
		if conn == w.fallback {
			key = KeyFallback
		}
		t := time.Now()
		c.Attempts++
		retry := sent[key] > 0
		sent[key]++
		resp, err := w.send(ctx, g, key, retry)
		if resp != nil && resp.StatusCode/100 == 2 {
			c.Served, c.Key = time.Since(t), key
		}
		return resp, err
	}
	var err error
	if w.cl == nil {
		err = w.retryLoop(ctx, send, rng)
	} else {
		var resp *http.Response
		if w.cfg.Fallback {
			resp, err = w.cl.DoFallback(ctx, []client.Conn{w.primary, w.fallback}, send)
		} else {
			resp, err = w.cl.Do(ctx, w.primary, func(ctx context.Context) (*http.Response, error) { return send(ctx, w.primary) })
		}
		if err == nil {
			_ = resp.Body.Close()
		}
	}
	c.End = time.Now().UnixNano()
	c.OK = err == nil
	if !c.OK {
		c.Cut = run.Err() != nil
		c.Served = 0
		c.Err = errKind(err)
	}
	return c
}

// errKind names a failed user call.
func errKind(err error) string {
	var de *client.DeniedError
	var ce *client.Error
	switch {
	case errors.As(err, &de):
		return "denied:" + de.Reason.String()
	case errors.As(err, &ce):
		return "failed:" + ce.LastOutcome.String()
	}
	return "error"
}

// send makes one provider request. It reads the (small) body so that the
// attempt's timeout can be released, and tags the request for the
// provider's log, including whether the guard admitted it as a probe and
// whether the call was already sent to this key (a retry there).
func (w *Worker) send(ctx context.Context, g int, key string, retry bool) (*http.Response, error) {
	a, guarded := client.AdmissionFrom(ctx)
	actx, cancel := context.WithTimeout(ctx, w.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, w.cfg.Provider+"/v1/chat", strings.NewReader(`{"model":"storm"}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set(fakeprovider.HeaderKey, key)
	req.Header.Set(fakeprovider.HeaderWorker, strconv.Itoa(w.cfg.ID))
	req.Header.Set(fakeprovider.HeaderGoroutine, strconv.Itoa(g))
	if retry {
		req.Header.Set(fakeprovider.HeaderRetry, "1")
	}
	if guarded && a.Decision == client.DecisionAllowProbe {
		req.Header.Set(fakeprovider.HeaderProbe, "1")
		w.probes.Add(1)
	}
	if guarded && a.Local {
		req.Header.Set(fakeprovider.HeaderLocal, "1")
		if w.cfg.Strategy == Cooldownd {
			w.locals.Add(1)
		}
	}
	req.Header.Set(fakeprovider.HeaderSentAt, strconv.FormatInt(time.Now().UnixNano(), 10))
	resp, err := w.hc.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// retryLoop is the NoCoordination strategy: the guard's retry rules
// without a breaker. Retries count over all candidates; a provider fault
// that is not retried, or retries used up, moves on to the next candidate.
func (w *Worker) retryLoop(ctx context.Context, send func(context.Context, client.Conn) (*http.Response, error), rng *rand.Rand) error {
	cands := []client.Conn{w.primary}
	if w.cfg.Fallback {
		cands = append(cands, w.fallback)
	}
	retries := 0
	var last error
	for _, conn := range cands {
		for {
			resp, err := send(ctx, conn)
			var body []byte
			if resp != nil && resp.StatusCode/100 != 2 {
				body, _ = io.ReadAll(resp.Body)
			}
			cl := client.Classify(w.rules, resp, body, err, ctx.Err())
			if cl.Outcome == client.OutcomeSuccess {
				_ = resp.Body.Close()
				return nil
			}
			last = &client.Error{Conn: conn, LastOutcome: cl.Outcome, HTTPStatus: cl.HTTPStatus, ErrorCode: cl.ErrorCode, Err: err}
			if ctx.Err() != nil {
				return last
			}
			if cl.Retryable && retries < w.cfg.MaxRetries {
				retries++
				d := max(backoff(w.cfg.BackoffBase, w.cfg.BackoffCap, retries, rng), cl.RetryAfter)
				if dl, ok := ctx.Deadline(); ok && !time.Now().Add(d).Before(dl) {
					return last
				}
				if sleep(ctx, d) != nil {
					return last
				}
				continue
			}
			if !providerFault(cl.Outcome) {
				return last
			}
			break // next candidate
		}
	}
	return last
}

// backoff is the guard's retry delay: base·2ⁿ⁻¹, capped, with equal jitter.
func backoff(base, limit time.Duration, n int, rng *rand.Rand) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d/2 + time.Duration(rng.Int64N(int64(d/2)+1))
}

func providerFault(o client.Outcome) bool {
	switch o {
	case client.OutcomeTransientFailure, client.OutcomeRateLimited, client.OutcomeOverloaded,
		client.OutcomeQuotaExhausted, client.OutcomeAuthFailure:
		return true
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func sleepUntil(ctx context.Context, t time.Time) error { return sleep(ctx, time.Until(t)) }
