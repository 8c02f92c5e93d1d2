package server

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// Bounds of the connections-by-state gauge, which lists connections on
// scrape: it keeps Redis load and label cardinality bounded.
const (
	// maxMetricTenants is how many tenants the gauge follows (the first
	// ones this replica served).
	maxMetricTenants = 100
	// maxMetricConnections is how many connections one scrape counts, over
	// all tenants; a tenant cut short reports truncated=1.
	maxMetricConnections = 20000
	// connScrapeTimeout bounds the Redis reads of one scrape.
	connScrapeTimeout = 3 * time.Second
	// connScrapeTTL reuses one listing for scrapes that come close together
	// (several Prometheus servers, or a manual curl).
	connScrapeTTL = 10 * time.Second
)

// Metrics are the server's Prometheus metrics, on a registry of its own
// (so several servers in one test process do not collide). No label
// carries a connection id: cardinality stays bounded.
type Metrics struct {
	reg         *prometheus.Registry
	admits      *prometheus.CounterVec
	shadowed    *prometheus.CounterVec
	reports     *prometheus.CounterVec
	rpc         *prometheus.HistogramVec
	transitions *prometheus.CounterVec
	probes      prometheus.Counter
	expired     prometheus.Counter
	overrides   *prometheus.CounterVec
	watchers    prometheus.Gauge
	redis       *prometheus.HistogramVec
	listErrors  prometheus.Counter

	// The children of the vectors every healthy call touches, by key.
	rpcBy     *children[rpcKey, prometheus.Observer]
	admitsBy  *children[admitKey, prometheus.Counter]
	shadowBy  *children[breaker.DenyReason, prometheus.Counter]
	reportsBy *children[reportKey, prometheus.Counter]

	mu       sync.RWMutex
	tenants  map[string]struct{}
	tenantsV int // bumped when a tenant is added
	attached bool
}

func newMetrics(version, revision string) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		admits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cooldownd_admits_total", Help: "Admit decisions per examined candidate, by decision and deny reason.",
		}, []string{"decision", "reason"}),
		shadowed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cooldownd_shadow_denials_total",
			Help: "Admit decisions per examined candidate that a policy in shadow mode allowed and would have denied, by the deny reason it would have given.",
		}, []string{"reason"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cooldownd_reports_total", Help: "Reports by outcome and whether they carried the current revision or a live lease.",
		}, []string{"outcome", "accepted"}),
		rpc: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cooldownd_rpc_duration_seconds", Help: "RPC latency by procedure and Connect code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"procedure", "code"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cooldownd_transitions_total",
			Help: "State changes this replica applied (through Admit, Report, overrides), by old state, new state and cause.",
		}, []string{"from", "to", "cause"}),
		probes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cooldownd_probes_granted_total", Help: "Probe leases granted (Admit decisions ALLOW_PROBE).",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cooldownd_probes_expired_total",
			Help: "Probe leases that lapsed without a report (the holder died or hung), counted when their slot is granted again.",
		}),
		overrides: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cooldownd_overrides_total", Help: "Admin overrides by action (reset, force_open, force_closed, clear).",
		}, []string{"action"}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cooldownd_watch_streams", Help: "WatchConnections streams open on this replica (dashboards, cooldownctl watch).",
		}),
		redis: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cooldownd_redis_duration_seconds", Help: "Redis round-trip latency by command, as reported to Server.ObserveRedis.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"op"}),
		listErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cooldownd_connections_scrape_errors_total", Help: "Failed or timed-out listings behind cooldownd_connections.",
		}),
		tenants: map[string]struct{}{},
	}
	if version == "" {
		version = "unknown"
	}
	if revision == "" {
		revision = "unknown"
	}
	m.rpcBy = newChildren(func(k rpcKey) prometheus.Observer { return m.rpc.WithLabelValues(k.procedure, k.code) })
	m.admitsBy = newChildren(func(k admitKey) prometheus.Counter {
		// Label values are the breaker's names (retry_budget and throttled
		// for the fleet rules); an admit that was not denied has an empty
		// reason, as the series always had, also when shadow mode allowed it.
		reason := ""
		if k.reason != breaker.ReasonNone {
			reason = k.reason.String()
		}
		return m.admits.WithLabelValues(k.decision.String(), reason)
	})
	m.shadowBy = newChildren(func(r breaker.DenyReason) prometheus.Counter { return m.shadowed.WithLabelValues(r.String()) })
	m.reportsBy = newChildren(func(k reportKey) prometheus.Counter {
		a := "false"
		if k.accepted {
			a = "true"
		}
		return m.reports.WithLabelValues(k.outcome.String(), a)
	})
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cooldownd_build_info", Help: "Always 1; the labels say which build of cooldownd this replica runs.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision},
	})
	buildInfo.Set(1)
	m.reg.MustRegister(buildInfo)
	m.reg.MustRegister(m.admits, m.shadowed, m.reports, m.rpc, m.transitions, m.probes, m.expired, m.overrides, m.watchers, m.redis, m.listErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewBuildInfoCollector())
	return m
}

func (m *Metrics) admit(d store.Decision) {
	m.admitsBy.get(admitKey{d.Decision, d.Reason}).Inc()
	if d.Shadowed != breaker.ReasonNone {
		m.shadowBy.get(d.Shadowed).Inc()
	}
}

func (m *Metrics) report(o breaker.Outcome, accepted bool) {
	m.reportsBy.get(reportKey{o, accepted}).Inc()
}

// redisOps are the op label values of cooldownd_redis_duration_seconds;
// anything else is "other", so a caller cannot grow the label set.
var redisOps = map[string]bool{
	"evalsha": true, "eval": true, "script": true, "pipeline": true, "ping": true, "zadd": true, "zrem": true,
	"zrangebylex": true, "zcard": true, "subscribe": true, "publish": true, "get": true, "set": true, "del": true,
	"wait": true, // a durable report's WAIT (--wait-replicas)
}

// ObserveRedis records one Redis round trip of op (a command name such as
// "evalsha", or "pipeline") that took d, for the Redis latency histogram.
// Wire it to the Redis client's hook; unknown ops count as "other".
func (s *Server) ObserveRedis(op string, d time.Duration) {
	op = strings.ToLower(op)
	if !redisOps[op] {
		op = "other"
	}
	s.metrics.redis.WithLabelValues(op).Observe(d.Seconds())
}

// MetricsHandler serves /metrics, behind Options.MetricsToken when set. The
// first call registers the connections-by-state collector, which needs the
// store. A server that serves metrics on a listener of its own
// (Options.MetricsOff) mounts it there; Handler mounts it on the API port
// unless Options.MetricsOff, and with auth on only when a metrics token is
// set (see apiMetricsHandler).
func (s *Server) MetricsHandler() http.Handler {
	m := s.metrics
	m.mu.Lock()
	if !m.attached {
		m.attached = true
		m.reg.MustRegister(newConnCollector(s))
	}
	m.mu.Unlock()
	// OpenMetrics when the scraper asks for it: the latency histograms'
	// exemplars (trace ids) travel only in that format.
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
	if s.metricsTo == "" {
		return h
	}
	want := sha256.Sum256([]byte(s.metricsTo))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !bearerIs(r.Header, want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "/metrics needs the metrics bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// errMetricsClosed is the API port's answer to a scrape with auth on and no
// metrics token.
const errMetricsClosed = "/metrics names every tenant: with authentication on it is served on a listener of its own (--metrics-addr) or with the metrics bearer token (--metrics-token-file), not on the API port"

// apiMetricsHandler is /metrics on the API port. Without auth, or with a
// metrics token, it is [Server.MetricsHandler]. With auth on and no metrics
// token it refuses every scrape (403): cooldownd_connections names every
// tenant this replica served, and neither an anonymous caller nor one
// tenant's token may read the others' names
// (docs/decisions/0044-auth-covers-metrics-and-reflection.md).
func (s *Server) apiMetricsHandler() http.Handler {
	if s.auth == nil || s.metricsTo != "" {
		return s.MetricsHandler()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, errMetricsClosed, http.StatusForbidden)
	})
}

// noteTenant remembers a tenant for the connections gauge, up to
// maxMetricTenants.
func (m *Metrics) noteTenant(tenant string) {
	m.mu.RLock()
	_, known := m.tenants[tenant]
	m.mu.RUnlock()
	if known {
		return // every call of a tenant after its first: no exclusive lock
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tenants[tenant]; !ok && len(m.tenants) < maxMetricTenants {
		m.tenants[tenant] = struct{}{}
		m.tenantsV++
	}
}

// knownTenants returns the tenants noted so far and a version that changes
// when one is added.
func (m *Metrics) knownTenants() ([]string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.tenants))
	for t := range m.tenants {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, m.tenantsV
}

// metricsInterceptor times unary RPCs, counts what their answers say
// (probes, overrides) and counts open watch streams. At debug level it
// also writes the access log: one line per call with its procedure, code,
// duration, tenant and connection.
func (s *Server) metricsInterceptor() connect.Interceptor { return metricsInterceptor{s} }

type metricsInterceptor struct{ s *Server }

func (i metricsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	m := i.s.metrics
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := i.s.now()
		ctx, ci := withCallInfo(ctx)
		res, err := next(ctx, req)
		code := codeOf(err)
		took := i.s.now().Sub(start)
		observe(ctx, m.rpcBy.get(rpcKey{req.Spec().Procedure, code}), took.Seconds())
		i.s.accessLog(ctx, req.Spec().Procedure, code, took, ci, req.Any())
		if err == nil && res != nil {
			m.count(req.Any(), res.Any())
		}
		return res, err
	}
}

func (i metricsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i metricsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	m := i.s.metrics
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		m.watchers.Inc()
		defer m.watchers.Dec()
		start := i.s.now()
		ctx, ci := withCallInfo(ctx)
		err := next(ctx, conn)
		i.s.accessLog(ctx, conn.Spec().Procedure, codeOf(err), i.s.now().Sub(start), ci, nil)
		return err
	}
}

// codeOf is an RPC's result as a metric label and log value.
func codeOf(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String() // CodeUnknown unless err is or wraps a *connect.Error
}

// accessLog writes one debug line for a finished call: procedure, code,
// duration (human), the caller's tenant and name, and the connection's
// short id when the request names one. Nothing else of the request (no
// label, no token) is logged.
func (s *Server) accessLog(ctx context.Context, procedure, code string, took time.Duration, ci *callInfo, req any) {
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.String("procedure", procedure), slog.String("code", code), slog.String("duration", human(took))}
	if ci.authd {
		tenant := ci.who.Tenant
		if r, ok := req.(interface{ GetTenant() string }); ok && r.GetTenant() != "" {
			tenant = r.GetTenant()
		} else if ci.who.AllTenants() {
			tenant = "*" // an operator's read of every tenant
		}
		attrs = append(attrs, slog.String("tenant", tenant), slog.String("actor", ci.who.Name))
	}
	if id, ok := requestID(req); ok {
		attrs = append(attrs, slog.String("id", ShortID(id)))
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "rpc", attrs...)
}

// requestID is the connection a request names (Admit: its first
// candidate).
func requestID(req any) (keys.ID, bool) {
	var b []byte
	switch r := req.(type) {
	case *cooldownv1.AdmitRequest:
		if len(r.GetCandidates()) > 0 {
			b = r.GetCandidates()[0].GetId()
		}
	case interface{ GetConnection() *cooldownv1.Connection }:
		b = r.GetConnection().GetId()
	case interface{ GetId() []byte }:
		b = r.GetId()
	}
	id, err := keys.IDFromBytes(b)
	return id, err == nil
}

// count updates the counters that an RPC's answer implies.
func (m *Metrics) count(req, res any) {
	switch r := res.(type) {
	case *cooldownv1.AdmitResponse:
		for _, c := range r.GetCandidates() {
			if c.GetDecision() == cooldownv1.Decision_DECISION_ALLOW_PROBE {
				m.probes.Inc()
			}
		}
	case *cooldownv1.ResetConnectionResponse:
		m.overrides.WithLabelValues("reset").Inc()
	case *cooldownv1.ForceConnectionResponse:
		rq, _ := req.(*cooldownv1.ForceConnectionRequest)
		switch rq.GetOverride() {
		case cooldownv1.Override_OVERRIDE_FORCED_OPEN:
			m.overrides.WithLabelValues("force_open").Inc()
		case cooldownv1.Override_OVERRIDE_FORCED_CLOSED:
			m.overrides.WithLabelValues("force_closed").Inc()
		default:
			m.overrides.WithLabelValues("clear").Inc()
		}
	}
}

// connCollector exports cooldownd_connections{tenant,state} and
// cooldownd_connections_open{tenant,cause} by listing the connections of
// the tenants this replica has served, at most every connScrapeTTL.
type connCollector struct {
	s         *Server
	byState   *prometheus.Desc
	byCause   *prometheus.Desc
	truncated *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	v      int // the tenants version of cached
	cached []prometheus.Metric
}

func newConnCollector(s *Server) *connCollector {
	return &connCollector{
		s: s,
		byState: prometheus.NewDesc("cooldownd_connections",
			"Connections by state, per tenant this replica has served (listed on scrape, cached up to 10 s).", []string{"tenant", "state"}, nil),
		byCause: prometheus.NewDesc("cooldownd_connections_open",
			"Open connections by cause, per tenant.", []string{"tenant", "cause"}, nil),
		truncated: prometheus.NewDesc("cooldownd_connections_truncated",
			"1 when the tenant's listing stopped at the per-scrape cap, so cooldownd_connections undercounts.", []string{"tenant"}, nil),
	}
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.byState
	ch <- c.byCause
	ch <- c.truncated
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tenants, v := c.s.metrics.knownTenants()
	if c.cached == nil || v != c.v || time.Since(c.at) >= connScrapeTTL {
		c.cached = c.list(tenants)
		c.at, c.v = time.Now(), v
	}
	for _, m := range c.cached {
		ch <- m
	}
}

func (c *connCollector) list(tenants []string) []prometheus.Metric {
	ctx, cancel := context.WithTimeout(context.Background(), connScrapeTimeout)
	defer cancel()
	out := []prometheus.Metric{}
	budget := maxMetricConnections
	for _, tenant := range tenants {
		states := map[breaker.Phase]int{breaker.Closed: 0, breaker.Open: 0, breaker.HalfOpen: 0}
		causes := map[breaker.Cause]int{}
		after, truncated, failed := "", false, false
		for {
			if budget <= 0 {
				truncated = true
				break
			}
			snaps, more, err := c.s.store.List(ctx, tenant, after, min(MaxPageSize, budget))
			if err != nil {
				failed = true
				break
			}
			for _, sn := range snaps {
				ph := sn.State.Phase
				if ph == 0 {
					ph = breaker.Closed
				}
				states[ph]++
				if ph == breaker.Open {
					causes[sn.State.Cause]++
				}
			}
			budget -= len(snaps)
			if !more {
				break
			}
			after = snaps[len(snaps)-1].ID.String()
		}
		if failed {
			c.s.metrics.listErrors.Inc()
			continue
		}
		for ph, n := range states {
			out = append(out, prometheus.MustNewConstMetric(c.byState, prometheus.GaugeValue, float64(n), tenant, ph.String()))
		}
		for cause, n := range causes {
			out = append(out, prometheus.MustNewConstMetric(c.byCause, prometheus.GaugeValue, float64(n), tenant, cause.String()))
		}
		t := 0.0
		if truncated {
			t = 1
		}
		out = append(out, prometheus.MustNewConstMetric(c.truncated, prometheus.GaugeValue, t, tenant))
	}
	return out
}

// transitions counts the state changes one operation applied.
func (m *Metrics) transitionsOf(evs []breaker.Event) {
	for _, e := range evs {
		m.transitions.WithLabelValues(e.From.String(), e.To.String(), e.Cause.String()).Inc()
	}
}
