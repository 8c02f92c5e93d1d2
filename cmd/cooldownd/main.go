// Command cooldownd is the cooldownd server: it keeps each LLM provider
// connection's cooldown and circuit-breaker state in Redis and serves the
// Connect API, gRPC health and reflection and /metrics on one port.
//
// With no --redis-url it runs on an embedded in-memory Redis, so
// `go run ./cmd/cooldownd` works on a fresh machine.
package main

import (
	"context"
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

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/store"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "cooldownd:", err)
		os.Exit(2)
	}
}

// run starts cooldownd and blocks until SIGTERM/SIGINT or ctx ends. When
// ready is not nil it receives the bound address once serving.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready chan<- string) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	rdb, closeRedis, err := openRedis(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	st, err := store.New(rdb, store.Options{Policy: &cfg.policy, IdleTTL: cfg.idleTTL, History: cfg.history})
	if err != nil {
		return err
	}
	srv, err := server.New(server.Options{Store: st, Logger: log})
	if err != nil {
		return err
	}
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
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("cooldownd serving", "addr", ln.Addr().String(), "policy", fmt.Sprintf("%+v", cfg.policy))
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

// openRedis connects to --redis-url, or starts the embedded Redis.
func openRedis(ctx context.Context, cfg config, log *slog.Logger) (redis.UniversalClient, func(), error) {
	if cfg.redisURL == "" {
		e, err := startEmbedded()
		if err != nil {
			return nil, nil, err
		}
		log.Warn("no --redis-url: using an embedded in-memory Redis; state is in memory, single-process, and lost on exit")
		return e.client, e.close, nil
	}
	opts, err := redis.ParseURL(cfg.redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid --redis-url: %w", redactURLError(err))
	}
	rdb := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("redis at %s does not answer: %w", opts.Addr, err)
	}
	log.Info("using Redis", "addr", opts.Addr, "db", opts.DB, "tls", opts.TLSConfig != nil)
	return rdb, func() { _ = rdb.Close() }, nil
}

// redactURLError keeps a URL parse error from echoing a password.
func redactURLError(err error) error {
	return errors.New("cannot parse it (expected redis://[user:password@]host:port/db or rediss://...)")
}
