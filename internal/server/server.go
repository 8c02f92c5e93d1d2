package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"go.opentelemetry.io/otel/trace"

	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/dashboard"
	"github.com/cooldownd/cooldownd/internal/store"
)

// Options configure a [Server].
type Options struct {
	// Store is the state store. Required.
	Store *store.Store
	// Logger is the structured logger (zero: slog.Default()).
	Logger *slog.Logger
	// Auth authenticates bearer tokens. Nil disables auth: every caller is
	// an admin of the default tenant (loopback and trials only).
	Auth Authenticator
	// Heartbeat is the idle interval of watch streams (zero: 15 s).
	Heartbeat time.Duration
	// BodyTimeout bounds reading a request's body, from the moment its
	// headers are read (zero: 5 s; negative: none). A client that sends
	// its body slowly is cut off before it can hold a goroutine longer.
	BodyTimeout time.Duration
	// RequestTimeout bounds each unary RPC when the caller sent no shorter
	// deadline (zero: 10 s; negative: none). Watch streams are not bounded.
	RequestTimeout time.Duration
	// ReadinessTimeout bounds /healthz and grpc.health.v1 checks (zero: 1 s).
	ReadinessTimeout time.Duration
	// StreamWriteTimeout bounds each write of a watch stream (zero: 30 s;
	// negative: none): a watcher that stops reading is cut off instead of
	// holding its handler, blocked on a full connection, forever.
	StreamWriteTimeout time.Duration
	// PolicyFor returns the breaker policy of a tenant's connection by its
	// label, as the store applies it (store.Options.PolicyFor); it is shown
	// in GetConnection, and every state and transition on the wire reads
	// its shadow mark and fleet counts through it. Nil: the store's policy
	// of the tenant.
	PolicyFor func(tenant, label string) breaker.Policy
	// MetricsToken, when set, is the bearer token /metrics requires. With
	// Auth set and no MetricsToken, Handler's /metrics refuses every scrape
	// (it names every tenant): serve MetricsHandler on a listener of its own.
	MetricsToken string
	// MetricsOff leaves /metrics out of Handler, for a server that serves
	// [Server.MetricsHandler] on a listener of its own.
	MetricsOff bool
	// CORSOrigins are the browser origins allowed to call the API
	// cross-origin ("*": any); empty: no CORS headers.
	CORSOrigins []string
	// Version and Revision are the build's, for cooldownd_build_info.
	Version, Revision string
	// TracerProvider, when set, traces every unary RPC: the caller's W3C
	// traceparent is continued, and the server span carries what decided
	// the call (internal/server/otel.go, docs/observability.md). Nil: no
	// spans, no cost.
	TracerProvider trace.TracerProvider
	// Now, for tests only, replaces the wall clock of log rate limiting
	// and of the access log's durations.
	Now func() time.Time
}

// Server holds the services' shared state.
type Server struct {
	store     *store.Store
	log       *slog.Logger
	auth      Authenticator
	heartbeat time.Duration
	bodyTO    time.Duration
	requestTO time.Duration
	readyTO   time.Duration
	streamTO  time.Duration
	errLog    *errorLog
	metrics   *Metrics
	policyFor func(tenant, label string) breaker.Policy
	metricsTo string
	metricsNo bool
	cors      []string
	now       func() time.Time
	tp        trace.TracerProvider
	closing   chan struct{}
	closeOnce sync.Once
	watchMu   sync.Mutex
	watching  map[string]int // open watch streams per tenant
	coalesce  *coalescer     // nil unless StartCoalescing (coalesce.go)
	peers     *router        // nil unless RouteCoalesced (route.go)
}

// New returns a Server. It returns an error when Options.Store is nil.
func New(o Options) (*Server, error) {
	if o.Store == nil {
		return nil, errors.New("server: a store is required")
	}
	s := &Server{store: o.Store, log: o.Logger, auth: o.Auth, heartbeat: o.Heartbeat, closing: make(chan struct{}),
		policyFor: o.PolicyFor, metricsTo: o.MetricsToken, metricsNo: o.MetricsOff, cors: o.CORSOrigins, tp: o.TracerProvider,
		bodyTO: orDefault(o.BodyTimeout, 5*time.Second), requestTO: orDefault(o.RequestTimeout, 10*time.Second),
		readyTO: orDefault(o.ReadinessTimeout, time.Second), streamTO: orDefault(o.StreamWriteTimeout, 30*time.Second)}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.heartbeat <= 0 {
		s.heartbeat = 15 * time.Second
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	s.now = now
	if s.policyFor == nil {
		s.policyFor = func(tenant, _ string) breaker.Policy { return s.store.Policy(tenant) }
	}
	for _, o := range s.cors {
		if err := checkOrigin(o); err != nil {
			return nil, err
		}
	}
	s.errLog = newErrorLog(s.log, now)
	s.metrics = newMetrics(o.Version, o.Revision)
	return s, nil
}

// Close ends open watch streams so a graceful shutdown does not wait for
// them.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closing) }) }

// CompressMinBytes is the smallest response the server compresses (when
// the client accepts it). Admit and Report answers are 10-120 bytes: gzip
// saves nothing on them, and resetting a gzip writer took about two fifths
// of the handler's CPU per Admit (docs/decisions/0019-compression-threshold.md).
const CompressMinBytes = 1024

// recoverOption makes a handler panic cost one request, not the process:
// logged and answered internal.
func (s *Server) recoverOption() connect.HandlerOption {
	return connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
		s.log.ErrorContext(ctx, "handler panic", "procedure", spec.Procedure, "panic", fmt.Sprint(p))
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	})
}

// Handler mounts the Connect services, gRPC health and reflection,
// /metrics and the dashboard (at / and /ui/) on one handler.
func (s *Server) Handler() http.Handler {
	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(MaxRequestBytes),
		connect.WithCompressMinBytes(CompressMinBytes),
		s.recoverOption(),
		// Outermost first: observe (metrics, access log) every call,
		// including refused ones; authenticate and authorise; bound.
		connect.WithInterceptors(s.metricsInterceptor(), s.authInterceptor(), s.timeoutInterceptor()),
	}
	if outer, inner, err := s.traceInterceptors(); err != nil {
		s.log.Error("tracing disabled", "err", err)
	} else if outer != nil {
		// The span first, so that metrics (exemplars) and the access log
		// see its trace id; its attributes last, after authentication.
		opts = append(opts, connect.WithInterceptors(inner))
		opts = append([]connect.HandlerOption{connect.WithInterceptors(outer)}, opts...)
	}
	mux := http.NewServeMux()
	mux.Handle(cooldownv1connect.NewCooldownServiceHandler(cooldownService{s}, opts...))
	mux.Handle(cooldownv1connect.NewAdminServiceHandler(adminService{s}, opts...))
	if s.peers != nil {
		mux.Handle(cooldownv1connect.NewPeerServiceHandler(peerService{s}, s.peerOptions()...))
	}
	checker := &healthChecker{store: s.store, timeout: s.readyTO}
	mux.Handle(grpchealth.NewHandler(checker))
	services := []string{cooldownv1connect.CooldownServiceName, cooldownv1connect.AdminServiceName, grpchealth.HealthV1ServiceName}
	s.mountReflection(mux, services...)
	if !s.metricsNo {
		mux.Handle("/metrics", s.apiMetricsHandler())
	}
	dash, err := dashboard.New(dashboard.Options{AuthEnabled: s.auth != nil, Identify: func(h http.Header) (dashboard.Identity, error) {
		who, err := s.Identify(h)
		role := dashboard.RoleViewer
		switch who.Role {
		case RoleAdmin:
			role = dashboard.RoleAdmin
		case RoleOperator:
			role = RoleOperator.String() // reads every tenant (ConnectionState.tenant set)
		}
		return dashboard.Identity{Tenant: who.Tenant, Role: role, Name: who.Name}, err
	}})
	if err != nil {
		// Only a broken build (the embedded files) gets here.
		s.log.Error("dashboard disabled", "err", err)
	} else {
		mux.Handle("GET /{$}", dash)
		mux.Handle("/ui/", dash)
	}
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.readyTO)
		defer cancel()
		if err := s.store.Ping(ctx); err != nil {
			s.errLog.log(ctx, slog.LevelWarn, "readiness: state store does not answer", "ping", err)
			http.Error(w, "state store unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return s.withCORS(s.limitBody(newWarmStacks(s.closing).warm(mux)))
}

// healthChecker reports SERVING when Redis answers within timeout.
type healthChecker struct {
	store   *store.Store
	timeout time.Duration
}

func (h *healthChecker) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	switch req.Service {
	case "", cooldownv1connect.CooldownServiceName, cooldownv1connect.AdminServiceName:
	default:
		return nil, connect.NewError(connect.CodeNotFound, errors.New("unknown service"))
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	if err := h.store.Ping(ctx); err != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}
