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
	"syscall"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/policy"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/store"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Environ(), os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "cooldownd:", err)
		os.Exit(2)
	}
}

// run starts cooldownd and blocks until SIGTERM/SIGINT or ctx ends. When
// ready is not nil it receives the bound address once serving.
func run(ctx context.Context, args []string, env environ, stderr io.Writer, ready chan<- string) error {
	cfg, err := parseConfig(args, env, stderr)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	for _, name := range cfg.unknownEnv {
		log.Warn("unknown environment variable ignored: it sets no flag (see cooldownd --help)", "name", name)
	}
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
		Durability: store.Durability{Replicas: cfg.waitReplicas, Timeout: cfg.waitTimeout}}
	if cfg.policyFile != "" {
		policies, err := loadPolicies(cfg.policyFile, cfg.policy)
		if err != nil {
			return err
		}
		sopts.PolicyFor = policies.For
		log.Info("policy overrides loaded", "path", cfg.policyFile)
	}
	st, err := store.New(rdb, sopts)
	if err != nil {
		return err
	}
	go func() { _ = st.Run(ctx) }() // timed transitions are applied and published on time (one replica sweeps)
	opts := server.Options{Store: st, Logger: log, BodyTimeout: cfg.readTimeout, RequestTimeout: cfg.requestTimeout, ReadinessTimeout: cfg.readyTimeout,
		StreamWriteTimeout: cfg.streamTimeout}
	if authn != nil {
		opts.Auth = authn
	}
	srv, err := server.New(opts)
	if err != nil {
		return err
	}
	rdb.AddHook(latencyHook{observe: srv.ObserveRedis})
	rdb.AddHook(timeoutHook{d: cfg.redisTimeout})
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Handler:           srv.Handler(),
		Protocols:         protocols,
		ReadHeaderTimeout: cfg.readTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if cfg.tlsCertFile != "" {
		certs, err := newCertReloader(cfg.tlsCertFile, cfg.tlsKeyFile, log)
		if err != nil {
			return err
		}
		go certs.run(ctx, cfg.tokensReload)
		hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get, NextProtos: []string{"h2", "http/1.1"}}
		protocols.SetHTTP2(true)
		ln = tls.NewListener(ln, hs.TLSConfig)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("cooldownd serving", "addr", ln.Addr().String(), "tls", cfg.tlsCertFile != "", "auth", authn != nil, "policy", fmt.Sprintf("%+v", cfg.policy))
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
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.logLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
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
