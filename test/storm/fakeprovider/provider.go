// Package fakeprovider is the storm harness's fake LLM provider: an HTTP
// server that answers from a scripted timeline and logs every arrival, so
// that the harness can check coordination from the provider's side rather
// than from what the clients believe.
package fakeprovider

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Request headers the storm workers send, and the provider logs.
const (
	HeaderKey       = "X-Key"       // the connection (API key) the call uses: "primary" or "fallback"
	HeaderWorker    = "X-Worker"    // the worker process index
	HeaderGoroutine = "X-Goroutine" // the goroutine within the worker
	HeaderProbe     = "X-Probe"     // "1" when the call was admitted as a recovery probe
	HeaderLocal     = "X-Local"     // "1" when the client's in-process breaker admitted it
	HeaderSentAt    = "X-Sent-At"   // Unix nanoseconds when the worker's call function started
	HeaderRetry     = "X-Retry"     // "1" when the call was already sent to this key: a retry there
)

// Kind is how a phase answers.
type Kind string

// Phase kinds.
const (
	OK        Kind = "ok"         // 200 after the healthy latency
	Error     Kind = "error"      // 500 server_error
	RateLimit Kind = "rate_limit" // 429 rate_limit_exceeded with Retry-After
	Quota     Kind = "quota"      // 429 insufficient_quota
	Hang      Kind = "hang"       // no answer until the client gives up (or MaxHang)
	// Capacity serves at most Phase.Capacity requests per second (per
	// key, in slots of CapacitySlot) and answers the rest 500: a provider
	// that fails whatever exceeds what it can serve.
	Capacity Kind = "capacity"
)

// CapacitySlot is the granularity of a Capacity phase: each slot of this
// length serves Capacity × CapacitySlot requests, the first that arrive.
const CapacitySlot = 100 * time.Millisecond

// Failing reports whether a phase of this kind is a provider failure. A
// Capacity phase fails only what exceeds its capacity: see
// [Arrival.Failing].
func (k Kind) Failing() bool { return k != OK && k != "" }

// Phase is one stretch of the timeline: From ≤ offset < To (offsets from
// the start instant), for one key ("" for every key) and, with Workers
// set, only for the requests of those worker processes (a broken network
// path between one process and the provider).
type Phase struct {
	Key        string        `json:"key,omitempty"`
	Workers    []int         `json:"workers,omitempty"`
	From       time.Duration `json:"from"`
	To         time.Duration `json:"to"`
	Kind       Kind          `json:"kind"`
	RetryAfter time.Duration `json:"retry_after,omitempty"` // RateLimit: the Retry-After sent
	Capacity   int           `json:"capacity,omitempty"`    // Capacity: requests served per second
}

// matches reports whether the phase applies to a request for key from
// worker at offset.
func (p Phase) matches(key string, worker int, offset time.Duration) bool {
	if (p.Key != "" && p.Key != key) || offset < p.From || offset >= p.To {
		return false
	}
	return len(p.Workers) == 0 || slices.Contains(p.Workers, worker)
}

// perSlot is how many requests a Capacity phase serves per slot, at least
// one.
func (p Phase) perSlot() int {
	return max(1, int(int64(p.Capacity)*int64(CapacitySlot)/int64(time.Second)))
}

// Script is the scenario the provider plays. Outside every phase it
// answers OK.
type Script struct {
	Phases  []Phase       `json:"phases"`
	Latency time.Duration `json:"latency"`  // service time of an OK answer
	MaxHang time.Duration `json:"max_hang"` // longest a Hang answer waits for the client
}

// At returns the phase in force for key and worker at offset (the first
// that matches), or an OK phase.
func (s Script) At(key string, worker int, offset time.Duration) Phase {
	for _, p := range s.Phases {
		if p.matches(key, worker, offset) {
			return p
		}
	}
	return Phase{Key: key, Kind: OK}
}

// Arrival is one request as the provider saw it. Times are Unix
// nanoseconds on the machine's clock, which every process of the harness
// shares.
type Arrival struct {
	Seq       int    `json:"seq"`
	Key       string `json:"key"`
	Worker    int    `json:"worker"`
	Goroutine int    `json:"goroutine"`
	Probe     bool   `json:"probe,omitempty"`
	Local     bool   `json:"local,omitempty"`
	Retry     bool   `json:"retry,omitempty"` // the worker had already sent this call to this key
	SentAt    int64  `json:"sent_at"`         // from X-Sent-At; 0 if absent
	At        int64  `json:"at"`              // arrival
	End       int64  `json:"end"`             // answer written or request abandoned; 0 while in flight
	Kind      Kind   `json:"kind"`            // the phase's kind at arrival
	Status    int    `json:"status"`          // 0 when abandoned without an answer
	// RetryAfter is the delay the answer asked for (rate limits).
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	// InFlight and ProbesInFlight count this key's requests (and probe
	// requests) in flight at arrival, this one included.
	InFlight       int `json:"in_flight"`
	ProbesInFlight int `json:"probes_in_flight"`
}

// Failing reports whether the provider failed this request: any request
// of a failing phase, but of a Capacity phase only those it did not
// serve.
func (a Arrival) Failing() bool {
	if a.Kind == Capacity {
		return a.Status != http.StatusOK
	}
	return a.Kind.Failing()
}

// Provider serves a Script. Create it with [New].
type Provider struct {
	script Script
	start  time.Time

	mu       sync.Mutex
	log      []Arrival
	open     map[int]bool // seqs in flight
	inflight map[string]int
	probes   map[string]int
	served   map[slot]int // Capacity phases: requests served per key and slot
}

// slot is one CapacitySlot of one key.
type slot struct {
	key string
	n   int64
}

// New returns a provider that plays s from start.
func New(s Script, start time.Time) *Provider {
	if s.MaxHang <= 0 {
		s.MaxHang = 30 * time.Second
	}
	return &Provider{script: s, start: start, open: make(map[int]bool),
		inflight: make(map[string]int), probes: make(map[string]int), served: make(map[slot]int)}
}

// Handler returns the provider's HTTP handler: POST/GET /v1/chat answers
// from the script; GET /log returns every arrival as JSON; GET /inflight
// returns the arrivals still in flight.
func (p *Provider) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat", p.chat)
	mux.HandleFunc("GET /log", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, p.Log()) })
	mux.HandleFunc("GET /inflight", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, p.InFlight()) })
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Log returns a copy of every arrival so far, in arrival order.
func (p *Provider) Log() []Arrival {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Arrival(nil), p.log...)
}

// InFlight returns the arrivals not answered yet, oldest first.
func (p *Provider) InFlight() []Arrival {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Arrival
	for _, a := range p.log {
		if p.open[a.Seq] {
			out = append(out, a)
		}
	}
	return out
}

func (p *Provider) chat(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := time.Now()
	key := r.Header.Get(HeaderKey)
	probe := r.Header.Get(HeaderProbe) == "1"
	worker, _ := strconv.Atoi(r.Header.Get(HeaderWorker))
	offset := now.Sub(p.start)
	ph := p.script.At(key, worker, offset)
	gor, _ := strconv.Atoi(r.Header.Get(HeaderGoroutine))
	sent, _ := strconv.ParseInt(r.Header.Get(HeaderSentAt), 10, 64)

	p.mu.Lock()
	p.inflight[key]++
	if probe {
		p.probes[key]++
	}
	seq := len(p.log)
	p.log = append(p.log, Arrival{
		Seq: seq, Key: key, Worker: worker, Goroutine: gor, Probe: probe, Local: r.Header.Get(HeaderLocal) == "1",
		Retry: r.Header.Get(HeaderRetry) == "1", SentAt: sent, At: now.UnixNano(), Kind: ph.Kind,
		InFlight: p.inflight[key], ProbesInFlight: p.probes[key],
	})
	if ph.Kind == Capacity {
		sl := slot{key: key, n: int64(offset / CapacitySlot)}
		if p.served[sl] < ph.perSlot() {
			p.served[sl]++
			ph.Kind = OK // within capacity: served as healthy (the log keeps the phase's kind)
		} else {
			ph.Kind = Error
		}
	}
	p.open[seq] = true
	p.mu.Unlock()

	status := p.answer(w, r, ph)

	p.mu.Lock()
	p.log[seq].End, p.log[seq].Status = time.Now().UnixNano(), status
	if ph.Kind == RateLimit {
		p.log[seq].RetryAfter = ph.RetryAfter
	}
	delete(p.open, seq)
	p.inflight[key]--
	if probe {
		p.probes[key]--
	}
	p.mu.Unlock()
}

// answer writes the phase's answer and returns its status (0: none).
func (p *Provider) answer(w http.ResponseWriter, r *http.Request, ph Phase) int {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	switch ph.Kind {
	case Error:
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":{"type":"server_error","message":"storm: outage"}}`)
		return http.StatusInternalServerError
	case RateLimit:
		ms := ph.RetryAfter.Milliseconds()
		h.Set("Retry-After-Ms", strconv.FormatInt(ms, 10))
		h.Set("Retry-After", strconv.FormatInt((ms+999)/1000, 10))
		// Retry-After in seconds rounds up; retry-after-ms is the exact
		// delay. The client takes the longest, so the whole second counts.
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"type":"rate_limit_error","code":"rate_limit_exceeded"}}`)
		return http.StatusTooManyRequests
	case Quota:
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"storm: quota"}}`)
		return http.StatusTooManyRequests
	case Hang:
		t := time.NewTimer(p.script.MaxHang)
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return 0
		case <-t.C:
			w.WriteHeader(http.StatusGatewayTimeout)
			return http.StatusGatewayTimeout
		}
	}
	if p.script.Latency > 0 {
		t := time.NewTimer(p.script.Latency)
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return 0
		case <-t.C:
		}
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, `{"id":"storm","choices":[{"message":{"content":"ok"}}]}`)
	return http.StatusOK
}

// Serve serves p on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, p *Provider) error {
	hs := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	err := hs.Serve(l)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
