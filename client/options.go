package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// FailMode says what the client does while cooldownd is unreachable.
type FailMode int

const (
	// FailOpen lets the in-process breaker decide while cooldownd is
	// unreachable: provider calls keep flowing, guarded per process. It is
	// the default.
	FailOpen FailMode = iota
	// FailClosed denies every call while cooldownd is unreachable: [Client.Admit]
	// returns an error wrapping [ErrUnavailable] and the guards a
	// [*DeniedError] with [ReasonUnavailable].
	FailClosed
)

// String returns "fail_open" or "fail_closed".
func (m FailMode) String() string {
	switch m {
	case FailOpen:
		return "fail_open"
	case FailClosed:
		return "fail_closed"
	}
	return "fail_mode(" + strconv.Itoa(int(m)) + ")"
}

// Defaults of the options.
const (
	DefaultAdmitTimeout = 250 * time.Millisecond
	DefaultMaxRetries   = 2
	DefaultBackoffBase  = 500 * time.Millisecond
	DefaultBackoffCap   = 8 * time.Second
	// DefaultProbePoll is how often a caller denied because a recovery
	// probe is in flight asks again (see [WithProbePoll]).
	DefaultProbePoll = 250 * time.Millisecond
)

// An Option configures a [Client]. Options are applied in order by [New].
type Option interface {
	applyToClient(*config)
}

type optionFunc func(*config)

func (f optionFunc) applyToClient(c *config) { f(c) }

// config is the resolved configuration of a Client.
type config struct {
	httpClient   connect.HTTPClient
	token        string
	admitTimeout time.Duration
	logger       *slog.Logger
	failMode     FailMode
	policy       breaker.Policy
	salt         []byte
	rules        Rules
	maxRetries   int
	maxWait      time.Duration // 0: Rules.MaxServerDelay
	noWait       bool
	backoffBase  time.Duration
	backoffCap   time.Duration
	probePoll    time.Duration

	degradeAfter  int
	degradeWindow time.Duration
	serviceRetry  time.Duration // how often to try cooldownd again while degraded
	queueSize     int
	queueMaxAge   time.Duration
	now           func() time.Time
	sleep         func(context.Context, time.Duration) error
	mirror        time.Duration // batch interval; 0: no mirror (WithoutMirror)
	reporter      string        // "": a random one at New
	tracing       *tracing      // nil: the global TracerProvider, once set (otel.go)
}

func defaultConfig() config {
	return config{
		admitTimeout: DefaultAdmitTimeout,
		failMode:     FailOpen,
		policy:       breaker.DefaultPolicy(),
		rules:        Rules{},
		maxRetries:   DefaultMaxRetries,
		backoffBase:  DefaultBackoffBase,
		backoffCap:   DefaultBackoffCap,
		probePoll:    DefaultProbePoll,

		degradeAfter:  DefaultDegradeAfter,
		degradeWindow: DefaultDegradeWindow,
		serviceRetry:  DefaultServiceRetry,
		queueSize:     DefaultReportQueueSize,
		queueMaxAge:   DefaultReportQueueMaxAge,
		mirror:        DefaultMirrorInterval,
		now:           time.Now,
		sleep:         sleep,
	}
}

// check validates the options and fills in what depends on others.
func (c *config) check() error {
	if err := c.policy.Validate(); err != nil {
		return fmt.Errorf("client: local policy: %w", policyError(err))
	}
	if n := len(c.salt); n != 0 && (n < keys.MinSaltLen || n > keys.MaxSaltLen) {
		return fmt.Errorf("client: salt must be empty or %d to %d bytes, got %d", keys.MinSaltLen, keys.MaxSaltLen, n)
	}
	if c.failMode != FailOpen && c.failMode != FailClosed {
		return fmt.Errorf("client: unknown fail mode %d", c.failMode)
	}
	if c.reporter == "" {
		c.reporter = newReporterID()
	} else if !validReporter(c.reporter) {
		return fmt.Errorf("client: reporter id must be 1 to %d characters of [A-Za-z0-9._-]", MaxReporterLen)
	}
	if c.rules.Now == nil {
		c.rules.Now = c.now // the client's clock, unless the rules have their own
	}
	c.rules = c.rules.withDefaults()
	if c.maxWait <= 0 {
		c.maxWait = c.rules.MaxServerDelay
	}
	c.backoffCap = max(c.backoffCap, c.backoffBase)
	return nil
}

// WithToken sends token as a bearer token (Authorization: Bearer …) on
// every call to cooldownd. The token is never logged.
func WithToken(token string) Option {
	return optionFunc(func(c *config) { c.token = token })
}

// WithAdmitTimeout bounds each call to cooldownd (Admit, Report,
// ExtendLease). When it passes, the client decides locally (see
// [FailMode]). A value ≤ 0 keeps the default, [DefaultAdmitTimeout].
func WithAdmitTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.admitTimeout = d
		}
	})
}

// WithHTTPClient sets the HTTP client used to reach cooldownd. The default
// speaks HTTP/2 (h2c prior knowledge for http:// URLs, falling back to
// HTTP/1.1 when the server only speaks that; ALPN for https://) with
// keep-alive and HTTP/2 health pings. A nil client keeps the default.
func WithHTTPClient(h connect.HTTPClient) Option {
	return optionFunc(func(c *config) { c.httpClient = h })
}

// WithLogger sets the logger for degradation and recovery notices and
// debug lines about retries. Nothing logged holds a credential, a token or
// more of a connection id than [ID.Short]. A nil logger keeps the default,
// [slog.Default].
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithFailMode sets what happens while cooldownd is unreachable. The
// default is [FailOpen].
func WithFailMode(m FailMode) Option {
	return optionFunc(func(c *config) { c.failMode = m })
}

// WithLocalPolicy sets the policy of the in-process breaker that decides
// while cooldownd is unreachable. The default is [DefaultPolicy]; [New]
// rejects an invalid policy.
func WithLocalPolicy(p Policy) Option {
	return optionFunc(func(c *config) { c.policy = p.breaker() })
}

// WithSalt sets the salt that keys connection ids (see docs/keys.md). Every
// process that must coordinate on a connection uses the same salt. It must
// be empty or 16 to 1024 bytes.
func WithSalt(salt []byte) Option {
	return optionFunc(func(c *config) { c.salt = append([]byte(nil), salt...) })
}

// WithRules sets the classification rules of the guards. Fields left zero
// take their defaults (see [Rules]).
func WithRules(r Rules) Option {
	return optionFunc(func(c *config) { c.rules = r })
}

// WithMaxRetries sets how many times a guard retries a retryable failure
// after the first attempt. 0 disables retries; a negative value keeps the
// default, [DefaultMaxRetries].
func WithMaxRetries(n int) Option {
	return optionFunc(func(c *config) {
		if n >= 0 {
			c.maxRetries = n
		}
	})
}

// WithMaxWait bounds how long a guard waits in total for a denied
// connection to become available. A denial whose retry-after would take
// the wait past it ends the guard at once with a [*DeniedError]. A value
// ≤ 0 keeps the default: the rules' MaxServerDelay (30 s).
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.maxWait = d
		}
	})
}

// WithNoWait makes the guards return a [*DeniedError] at once on every
// denial instead of waiting, so that the caller can switch to another
// model or answer "busy" right away.
func WithNoWait() Option {
	return optionFunc(func(c *config) { c.noWait = true })
}

// WithProbePoll sets how often a caller denied with PROBE_IN_FLIGHT asks
// again. The probe usually ends long before its lease would, and the
// callers resume as soon as it closes the connection; each poll is one
// read-only Admit. Values ≤ 0 keep [DefaultProbePoll].
func WithProbePoll(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.probePoll = d
		}
	})
}

// WithBackoff sets the guard's retry backoff: the n-th retry waits about
// base·2ⁿ⁻¹ (with jitter, between half and all of it), at most limit. A
// server-requested delay is never shortened. Values ≤ 0 keep the defaults,
// [DefaultBackoffBase] and [DefaultBackoffCap].
func WithBackoff(base, limit time.Duration) Option {
	return optionFunc(func(c *config) {
		if base > 0 {
			c.backoffBase = base
		}
		if limit > 0 {
			c.backoffCap = limit
		}
	})
}

// WithDegradeAfter sets when the client leaves cooldownd: after n
// consecutive calls that no endpoint answered (a transport failure,
// unavailable, or the admit timeout), all within window, and every
// endpoint among them. Until then each such call alone is decided by the
// fail mode; one answer brings the client back. Refusals (a bad token, an
// invalid argument) never count. Values ≤ 0 keep the defaults,
// [DefaultDegradeAfter] and [DefaultDegradeWindow].
func WithDegradeAfter(n int, window time.Duration) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.degradeAfter = n
		}
		if window > 0 {
			c.degradeWindow = window
		}
	})
}

// WithServiceRetry sets how often a degraded client tries cooldownd again
// (one call per interval goes to it; the others are decided in-process).
// A value ≤ 0 keeps [DefaultServiceRetry].
func WithServiceRetry(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.serviceRetry = d
		}
	})
}

// WithReportQueue bounds the queue of reports cooldownd did not take at
// once: at most size reports (the oldest is dropped first, a report that
// holds a probe lease last) and none older than maxAge. Values ≤ 0 keep
// the defaults, [DefaultReportQueueSize] and [DefaultReportQueueMaxAge].
func WithReportQueue(size int, maxAge time.Duration) Option {
	return optionFunc(func(c *config) {
		if size > 0 {
			c.queueSize = size
		}
		if maxAge > 0 {
			c.queueMaxAge = maxAge
		}
	})
}

// DefaultMirrorInterval is how often a client with a mirror reports the
// successes it admitted itself (see [WithMirror]).
const DefaultMirrorInterval = time.Second

// WithMirror sets the batch interval of the client's mirror (≤ 0:
// [DefaultMirrorInterval]); it also turns the mirror back on after
// [WithoutMirror]. The mirror is on by default.
//
// With it the client keeps a mirror of the connections it uses, fed by
// cooldownd's WatchConnections stream, and admits a call without a round
// trip while its connection is closed and healthy. The stream opens at
// cooldownd's first answer to an Admit (a client that never calls holds
// none). The first call to a connection still asks cooldownd: its answer
// (closed, allowed, under a live stream) mirrors the connection. Successes are counted and reported in batches, one report per
// connection and revision every interval; every failure, server hint and
// probe still goes to cooldownd at once, so trips, cooldowns and the single
// probe stay fleet-exact, and a failure or hint of this process stops its
// own local admits at once (docs/decisions/0037).
//
// What it trades: a cooldown or trip set by another process stops this
// process's local admits when its event arrives (one watch event's
// latency, milliseconds on a healthy network), and cooldownd learns this
// process's successes up to one interval late, so a failure streak of
// other processes may trip before a batch of successes that happened in
// between arrives. While the watch stream is down nothing is admitted
// from the mirror; an entry is checked with cooldownd again after 30 s.
// A retry is never admitted from the mirror (the fleet's retry budget is
// cooldownd's), nor a connection whose last throttle probability seen (in
// an Admit or Report answer, or an event) is above 0, until an Admit
// answer says 0 again. Batches keep retries apart from first attempts.
//
// The watch needs a token of the client role and a cooldownd that lets
// clients watch (the one that counts batched successes). Until cooldownd
// has accepted the stream, and whenever it refuses it (an older cooldownd,
// a token that may not watch), the client works as without the mirror:
// every call asks cooldownd and every report goes at once; a refusal is
// logged once (warning) and counted in [MirrorStats].Refused, and the
// client asks again about every 30 s. Calls never fail for it.
func WithMirror(interval time.Duration) Option {
	return optionFunc(func(c *config) {
		if interval <= 0 {
			interval = DefaultMirrorInterval
		}
		c.mirror = interval
	})
}

// WithoutMirror turns the mirror off (see [WithMirror]): every call asks
// cooldownd and every report is sent at once, so cooldownd learns each
// outcome before [Client.Report] returns, at the cost of an Admit and a
// Report round trip per call. No watch stream is opened.
func WithoutMirror() Option {
	return optionFunc(func(c *config) { c.mirror = 0 })
}

// MaxReporterLen is the longest reporter id (see [WithReporter]).
const MaxReporterLen = 64

// WithReporter sets the id this client sends as the reporter of every
// report (ReportRequest.reporter): 1 to [MaxReporterLen] characters of
// [A-Za-z0-9._-]; [New] rejects any other. By default each [New] picks a
// random one (16 hex characters).
//
// cooldownd's trip quorum (the policy knob trip-quorum) opens a closed
// connection on ambiguous failures (timeouts, resets, 5xx) only once that
// many distinct reporters saw them, so that one process with a broken
// network path cannot open a connection for the whole fleet. A reporter is
// one process: ids must differ between processes (two processes sharing
// one count as one) and should stay the same for a process's lifetime.
// Set it to a stable name such as the pod's name to make the dashboard's
// reporters readable; never put a secret in it.
func WithReporter(id string) Option {
	return optionFunc(func(c *config) { c.reporter = id })
}

// validReporter reports whether id is 1 to MaxReporterLen characters of
// [A-Za-z0-9._-].
func validReporter(id string) bool {
	if id == "" || len(id) > MaxReporterLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '.', b == '_', b == '-':
		default:
			return false
		}
	}
	return true
}

// newReporterID returns a random reporter id: 16 hex characters.
func newReporterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
