package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// newLogger builds the process's logger in the chosen format and level.
// Every time.Duration attribute is written as a duration string ("200ms",
// "5m", "1h") in both formats: slog's JSON handler would write nanoseconds.
func newLogger(cfg config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.logLevel))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationAttr}
	if cfg.logFormat == "json" {
		return slog.New(traceHandler{slog.NewJSONHandler(w, opts)})
	}
	return slog.New(traceHandler{slog.NewTextHandler(w, opts)})
}

func durationAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, durationText(a.Value.Duration()))
	}
	return a
}

// durationText is d exactly, without the zero units time.Duration.String
// leaves at the end: 5m0s is 5m, 1h0m0s is 1h.
func durationText(d time.Duration) string {
	s := d.String()
	for _, zero := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, zero) {
			s = s[:len(s)-2]
		}
	}
	return s
}

// policyAttrs are a policy's knobs as named fields, every knob of the
// table under its policy-file key: a count an integer, a ratio a number, a
// span a duration, a switch a boolean.
func policyAttrs(p breaker.Policy) slog.Attr {
	knobs := breaker.Knobs()
	attrs := make([]any, 0, len(knobs))
	for _, k := range knobs {
		v := k.Get(p)
		switch k.Kind {
		case breaker.Count:
			attrs = append(attrs, slog.Int(k.Key(), int(v)))
		case breaker.Ratio:
			attrs = append(attrs, slog.Float64(k.Key(), v))
		case breaker.Switch:
			attrs = append(attrs, slog.Bool(k.Key(), v != 0))
		default:
			attrs = append(attrs, slog.Duration(k.Key(), time.Duration(v)))
		}
	}
	return slog.Group("policy", attrs...)
}

// httpErrorLog is the http.Server's ErrorLog: its lines become structured
// records (component=http). Lines about one client's connection (a client
// that sent GOAWAY with an error code, which net/http words as "starting
// graceful shutdown", or a TLS handshake a client abandoned) are debug
// records: the server is not shutting down, one client left.
func httpErrorLog(l *slog.Logger) *log.Logger {
	return log.New(lineWriter{func(line string) {
		lvl, msg := slog.LevelWarn, "http server error"
		switch {
		case strings.HasPrefix(line, "http2: received GOAWAY"):
			lvl, msg = slog.LevelDebug, "a client closed its HTTP/2 connection (GOAWAY)"
		case strings.HasPrefix(line, "http: TLS handshake error"):
			lvl, msg = slog.LevelDebug, "a client's TLS handshake failed"
		}
		l.Log(context.Background(), lvl, msg, "component", "http", "detail", line)
	}}, "", 0)
}

// lineWriter calls f with each line written to it (log.Logger writes one
// line per call).
type lineWriter struct{ f func(string) }

func (w lineWriter) Write(p []byte) (int, error) {
	w.f(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// redisLogEvery is how often one kind of go-redis log line is written;
// the ones held back are counted on the next.
const redisLogEvery = 10 * time.Second

// redisLogger routes go-redis's own log lines (its pool's dial failures,
// Sentinel and Cluster topology changes) through slog as warn records
// with component=redis, each format at most once per redisLogEvery: a
// Redis outage makes go-redis print the same line several times a second.
// Whether Redis is reachable is said once, by [redisHealth].
type redisLogger struct {
	log *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	last map[string]*errorSeen
}

type errorSeen struct {
	at         time.Time
	suppressed int
}

func newRedisLogger(l *slog.Logger, now func() time.Time) *redisLogger {
	return &redisLogger{log: l, now: now, last: map[string]*errorSeen{}}
}

// Printf implements go-redis's logging interface.
func (r *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	now := r.now()
	r.mu.Lock()
	seen := r.last[format]
	if seen != nil && now.Sub(seen.at) < redisLogEvery {
		seen.suppressed++
		r.mu.Unlock()
		return
	}
	suppressed := 0
	if seen != nil {
		suppressed = seen.suppressed
	} else if len(r.last) >= 64 {
		clear(r.last) // formats are a fixed set in go-redis; bound it anyway
	}
	r.last[format] = &errorSeen{at: now}
	r.mu.Unlock()
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	r.log.WarnContext(ctx, "redis client: "+msg, "component", "redis", "suppressed_since_last", suppressed)
}

// redisHealth watches every Redis round trip and logs one line when Redis
// becomes unreachable (a network error or a timeout) or slow (a round trip
// above slow), and one when it is back, with how long it was so. A reply
// of Redis itself (an error such as NOSCRIPT, or a nil) means it answered.
// A call that its caller's deadline or cancel ended says nothing about
// Redis.
type redisHealth struct {
	log  *slog.Logger
	now  func() time.Time
	slow time.Duration

	// healthy mirrors state == healthOK for the lock-free fast path: a
	// fast answer while healthy (nearly every round trip) takes no lock.
	healthy atomic.Bool

	mu    sync.Mutex
	state healthState
	since time.Time
	fast  int // consecutive fast answers while slow
}

type healthState int

const (
	healthOK healthState = iota
	healthSlow
	healthDown
)

// fastToRecover is how many fast answers in a row end a slow period (one
// fast answer among slow ones is not a recovery).
const fastToRecover = 5

func newRedisHealth(l *slog.Logger, now func() time.Time, slow time.Duration) *redisHealth {
	h := &redisHealth{log: l, now: now, slow: slow}
	h.healthy.Store(true)
	return h
}

// observe records one round trip that took d and ended with err.
func (h *redisHealth) observe(ctx context.Context, d time.Duration, err error) {
	var reply redis.Error
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller's own deadline or cancel ended the call; Redis may be
		// fine.
	case err == nil, errors.Is(err, redis.Nil), errors.As(err, &reply):
		if d >= h.slow {
			h.move(healthSlow, d, nil)
		} else {
			h.move(healthOK, d, nil)
		}
	case isNetworkOrTimeout(err):
		h.move(healthDown, d, err)
	}
}

// isNetworkOrTimeout: Redis could not be reached or did not answer in
// time. A closed client (redis.ErrClosed) is this process shutting down,
// not Redis.
func isNetworkOrTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "connection pool")
}

func (h *redisHealth) move(to healthState, d time.Duration, err error) {
	if to == healthOK && h.healthy.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	from, lasted := h.state, now.Sub(h.since)
	if to == healthOK && from == healthSlow {
		if h.fast++; h.fast < fastToRecover {
			return
		}
	}
	if to != healthOK {
		h.fast = 0
	}
	if to == from {
		return
	}
	h.state, h.since, h.fast = to, now, 0
	h.healthy.Store(to == healthOK)
	d, lasted = measured(d), measured(lasted)
	switch {
	case to == healthDown:
		h.log.Warn("redis unreachable: requests answer unavailable and clients decide locally until it is back",
			"component", "redis", "err", err.Error(), "took", d)
	case to == healthSlow && from == healthOK:
		h.log.Warn("redis slow", "component", "redis", "took", d, "slow_above", h.slow)
	case from == healthDown:
		h.log.Info("redis reachable again", "component", "redis", "unreachable_for", lasted, "slow", to == healthSlow)
	default: // slow → ok
		h.log.Info("redis fast again", "component", "redis", "slow_for", lasted)
	}
}

// healthHook feeds redisHealth from the client's round trips.
type healthHook struct{ h *redisHealth }

func (k healthHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k healthHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := k.h.now()
		err := next(ctx, cmd)
		k.h.observe(ctx, k.h.now().Sub(start), err)
		return err
	}
}

func (k healthHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := k.h.now()
		err := next(ctx, cmds)
		k.h.observe(ctx, k.h.now().Sub(start), err)
		return err
	}
}

// measured rounds a measured duration for people: to the millisecond, or
// the microsecond below one millisecond.
func measured(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
