// Command cooldownd is the cooldownd server: it keeps each LLM provider
// connection's cooldown and circuit-breaker state in Redis and serves the
// Connect API, gRPC health and reflection and /metrics on one port.
//
// With no --redis-url it runs on an embedded in-memory Redis, so
// `go run ./cmd/cooldownd` works on a fresh machine.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"

	"github.com/cooldownd/cooldownd/cmd/internal/buildinfo"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/policy"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/store"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		var logged *loggedError
		if !errors.As(err, &logged) {
			fmt.Fprintln(os.Stderr, "cooldownd:", err)
		}
		os.Exit(2)
	}
}

// loggedError is an error run has already written to the log, as a record
// in the log's format; main does not print it again.
type loggedError struct{ err error }

func (e *loggedError) Error() string { return e.err.Error() }
func (e *loggedError) Unwrap() error { return e.err }

// logFatal writes err as the last record of the log (level error) and
// returns it marked as written: with --log-format json every line on
// stderr is JSON, the one that says why cooldownd exits too.
func logFatal(log *slog.Logger, err error) error {
	log.Error("cooldownd exits: "+err.Error(), "err", err.Error())
	return &loggedError{err: err}
}

// run starts cooldownd and blocks until SIGTERM/SIGINT or ctx ends. When
// ready is not nil it receives the bound address once serving. Logs go to
// stderr; stdout only carries --version. An error from the time the log's
// format is known is also written to the log (see [logFatal]).
func run(ctx context.Context, args []string, env environ, stdout, stderr io.Writer, ready chan<- string) error {
	cfg, err := parseConfig(args, env, stderr)
	if err != nil {
		if cfg.logFormat == "json" && !errors.Is(err, flag.ErrHelp) {
			return logFatal(newLogger(cfg, stderr), err)
		}
		return err
	}
	build := buildinfo.Get()
	if cfg.version {
		fmt.Fprintf(stdout, "cooldownd %s\n", build)
		return nil
	}
	log := newLogger(cfg, stderr)
	// Packages that log through slog's default (the store's sweeper and
	// watch hub) write in the chosen format too.
	slog.SetDefault(log)
	// go-redis's own lines (pool dial failures, topology changes) become
	// structured records of this logger. The logger is process-wide in
	// go-redis: the last run in a process wins.
	redis.SetLogger(newRedisLogger(log, time.Now))
	for _, name := range cfg.unknownEnv {
		log.Warn("unknown environment variable ignored: it sets no flag (see cooldownd --help)", "name", name)
	}
	if err := serve(ctx, cfg, env, build, log, ready); err != nil {
		return logFatal(log, err)
	}
	return nil
}

// serve runs the configured server until SIGTERM/SIGINT or ctx ends.
func serve(ctx context.Context, cfg config, env environ, build buildinfo.Info, log *slog.Logger, ready chan<- string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	authn, err := openAuth(ctx, cfg, log)
	if err != nil {
		return err
	}
	rdb, closeRedis, err := openRedis(ctx, cfg, env.get, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	sopts := store.Options{Policy: &cfg.policy, IdleTTL: cfg.idleTTL, History: cfg.history, MaxConnsPerTenant: cfg.maxConnsTenant,
		Durability: store.Durability{Replicas: resolveWaitReplicas(ctx, cfg, rdb, log), Timeout: cfg.waitTimeout}, ReportKeyTTL: cfg.reportKeyTTL}
	if cfg.policyFile != "" {
		policies, err := loadPolicies(cfg.policyFile, cfg.policy)
		if err != nil {
			return err
		}
		sopts.PolicyFor = policies.For
		log.Info("policy overrides loaded", "path", cfg.policyFile)
	}
	metricsToken, err := readMetricsToken(cfg.metricsTokenFile)
	if err != nil {
		return err
	}
	tp, stopTracing, err := startTracing(ctx, cfg.otel, env, build)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		_ = stopTracing(sctx) // flushes the last spans
	}()
	if tp != nil {
		if err := traceRedis(ctx, rdb, tp); err != nil {
			return err
		}
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("tracing: "+err.Error(), "component", "otel")
		}))
		log.Info("tracing on: spans are exported over OTLP/HTTP", "endpoint_flag", cfg.otel.endpoint != "")
	}
	st, err := store.New(rdb, sopts)
	if err != nil {
		return err
	}
	go func() { _ = st.Run(ctx) }() // timed transitions are applied and published on time (one replica sweeps)
	opts := server.Options{Store: st, Logger: log, BodyTimeout: cfg.readTimeout, RequestTimeout: cfg.requestTimeout, ReadinessTimeout: cfg.readyTimeout,
		StreamWriteTimeout: cfg.streamTimeout, PolicyFor: sopts.PolicyFor, MetricsToken: metricsToken, MetricsOff: cfg.metricsAddr != "",
		CORSOrigins: splitList(cfg.corsOrigins), Version: build.Version, Revision: build.Revision}
	if authn != nil {
		opts.Auth = authn
	}
	if tp != nil {
		opts.TracerProvider = tp
	}
	srv, err := server.New(opts)
	if err != nil {
		return err
	}
	srv.StartCoalescing(cfg.coalesce) // --coalesce-interval, off at 0 (decision 0054)
	if cfg.peerAddress != "" {
		po, err := peerOptions(cfg)
		if err != nil {
			return err
		}
		if err := srv.RouteCoalesced(po); err != nil {
			return err
		}
		log.Info("coalesced batches routed to each connection's owner among the live replicas", "peer_address", cfg.peerAddress)
	}
	rdb.AddHook(latencyHook{observe: srv.ObserveRedis})
	// Outside the timeout, so a round trip cut off by --redis-timeout is
	// seen as one; "slow" is half of it.
	rdb.AddHook(healthHook{newRedisHealth(log, time.Now, cfg.redisTimeout/2)})
	rdb.AddHook(timeoutHook{d: cfg.redisTimeout})
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	hs := server.NewHTTPServer(srv.Handler(), server.HTTPOptions{ReadHeaderTimeout: cfg.readTimeout, ErrorLog: httpErrorLog(log)})
	if cfg.tlsCertFile != "" {
		certs, err := newCertReloader(cfg.tlsCertFile, cfg.tlsKeyFile, log)
		if err != nil {
			return err
		}
		go certs.run(ctx, cfg.tokensReload)
		hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get, NextProtos: []string{"h2", "http/1.1"}}
		hs.Protocols.SetHTTP2(true)
		ln = tls.NewListener(ln, hs.TLSConfig)
	}
	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(ln) }()
	var ms *http.Server
	metricsAt := "on --addr"
	if cfg.metricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			return fmt.Errorf("listen on --metrics-addr %s: %w", cfg.metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", srv.MetricsHandler())
		ms = &http.Server{Handler: mux, ReadHeaderTimeout: cfg.readTimeout, IdleTimeout: 2 * time.Minute, ErrorLog: httpErrorLog(log)}
		go func() { errc <- ms.Serve(mln) }()
		metricsAt = mln.Addr().String()
	}
	if authn != nil && cfg.metricsAddr == "" && metricsToken == "" {
		// /metrics names every tenant: with auth on, the API port refuses it.
		log.Warn("/metrics is refused on --addr with --tokens-file: give --metrics-addr (a port for Prometheus only) or --metrics-token-file")
		metricsAt = "refused (auth on: give --metrics-addr or --metrics-token-file)"
	}
	log.Info("cooldownd serving", "version", build.Version, "revision", build.Revision, "addr", ln.Addr().String(),
		"tls", cfg.tlsCertFile != "", "auth", authn != nil, "metrics", metricsAt, "metrics_token", metricsToken != "",
		"policy_file", cfg.policyFile, policyAttrs(cfg.policy))
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "timeout", cfg.shutdownTimeout)
	srv.Close()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if ms != nil {
		_ = ms.Close() // scrapes are idempotent: no draining
	}
	err = hs.Shutdown(sctx)
	// Drained: no handler adds to the successes this replica holds now, so
	// applying them loses none it acknowledged (decision 0054).
	fctx, fcancel := context.WithTimeout(context.Background(), cfg.requestTimeout)
	srv.StopCoalescing(fctx)
	fcancel()
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// loadPolicies reads --policy-file over the flags' policy.
func loadPolicies(path string, base breaker.Policy) (*policy.Resolver, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read --policy-file: %w", err)
	}
	r, err := policy.Parse(data, base)
	if err != nil {
		return nil, fmt.Errorf("--policy-file %s: %w", path, err)
	}
	return r, nil
}

// readMetricsToken reads --metrics-token-file (empty path: no token).
func readMetricsToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	return readTokenFile("--metrics-token-file", path)
}

// readTokenFile reads the one token of at least 16 characters the file
// of flag holds.
func readTokenFile(flag, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", flag, err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%s %s must hold one token of at least 16 characters", flag, path)
	}
	return tok, nil
}
