package client

import (
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// Defaults of the degradation rule (see [WithDegradeAfter]).
const (
	DefaultDegradeAfter  = 3
	DefaultDegradeWindow = 10 * time.Second
	// DefaultServiceRetry is how often a degraded client tries cooldownd
	// again (see [WithServiceRetry]).
	DefaultServiceRetry = time.Second
)

// health decides whether calls go to cooldownd. One failed call is decided
// in-process for that call only; the client leaves cooldownd (degrades)
// only after [config.degradeAfter] consecutive outage failures within
// [config.degradeWindow] that reached every endpoint, and comes back after
// one answer. While degraded, one call per retry interval tries cooldownd.
// It is safe for concurrent use.
type health struct {
	after     int
	window    time.Duration
	every     time.Duration
	endpoints int
	mode      FailMode
	log       *slog.Logger
	onDown    func() // the client degrades: calls are decided in-process
	onUp      func() // cooldownd answers again after an outage

	mu       sync.Mutex
	fails    int          // consecutive outage failures
	first    time.Time    // of the current streak
	failed   map[int]bool // endpoints that failed in the streak
	degraded bool
	nextTry  time.Time
	outages  uint64
}

func newHealth(cfg config, endpoints int, log *slog.Logger, onDown, onUp func()) *health {
	return &health{after: cfg.degradeAfter, window: cfg.degradeWindow, every: cfg.serviceRetry,
		endpoints: endpoints, mode: cfg.failMode, log: log, onDown: onDown, onUp: onUp, failed: map[int]bool{}}
}

// useService reports whether a call should go to cooldownd now: always
// when healthy; while degraded, once per retry interval (the caller that
// gets true is the one that tries).
func (h *health) useService(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.degraded {
		return true
	}
	if now.Before(h.nextTry) {
		return false
	}
	h.nextTry = now.Add(h.every)
	return true
}

// isDegraded reports whether the client currently decides in-process.
func (h *health) isDegraded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.degraded
}

// failure records a call that none of the endpoints it tried answered. It
// reports whether the client is degraded after it; when this call
// degrades it, onDown is called.
func (h *health) failure(now time.Time, op string, tried []int, err error) bool {
	degraded, degrades := h.fail(now, op, tried, err)
	if degrades {
		h.onDown()
	}
	return degraded
}

// fail is failure under h.mu; it also says whether this call degraded
// the client.
func (h *health) fail(now time.Time, op string, tried []int, err error) (degraded, degrades bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.degraded {
		h.nextTry = now.Add(h.every)
		return true, false
	}
	if h.fails == 0 || now.Sub(h.first) > h.window {
		h.fails, h.first = 0, now
		clear(h.failed)
	}
	h.fails++
	for _, e := range tried {
		h.failed[e] = true
	}
	if h.fails < h.after || len(h.failed) < h.endpoints {
		h.log.Debug("cooldownd call failed; this call is decided in-process",
			slog.String("op", op), slog.String("code", connect.CodeOf(err).String()),
			slog.Int("consecutive", h.fails), slog.String("error", err.Error()))
		return false, false
	}
	h.degraded, h.nextTry = true, now.Add(h.every)
	h.outages++
	h.log.Warn("cooldownd unreachable; deciding in-process until it answers again",
		slog.String("op", op), slog.String("code", connect.CodeOf(err).String()),
		slog.Int("consecutive_failures", h.fails), slog.String("fail_mode", h.mode.String()),
		slog.String("error", err.Error()))
	return true, true
}

// success records that cooldownd answered: the failure streak ends, and
// an outage ends (logged once, onUp called).
func (h *health) success() {
	h.mu.Lock()
	if h.fails != 0 {
		h.fails = 0
		clear(h.failed)
	}
	was := h.degraded
	h.degraded = false
	h.mu.Unlock()
	if was {
		h.log.Info("cooldownd reachable again; deciding through it")
		h.onUp()
	}
}

// degradations returns how many times the client degraded.
func (h *health) degradations() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.outages
}
