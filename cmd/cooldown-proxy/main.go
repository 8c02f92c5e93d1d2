// Command cooldown-proxy is a sidecar reverse proxy that puts cooldownd's
// shared cooldowns and breakers in front of every LLM provider call of an
// application in any language: the application points its SDK's base URL
// at the proxy (OPENAI_BASE_URL=http://127.0.0.1:8081/openai/v1) and
// changes nothing else. See docs/proxy.md.
//
// Every flag is also read from COOLDOWN_PROXY_<NAME> (dashes as
// underscores) and from the --config file (YAML: a flag's name to its
// value, a list for --route); a flag beats the variable, which beats the
// file.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/cmd/internal/buildinfo"
	"github.com/cooldownd/cooldownd/internal/proxy"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "cooldown-proxy:", err)
		os.Exit(1)
	}
}

// routes is the repeatable --route flag.
type routes []string

func (r *routes) String() string { return strings.Join(*r, ",") }
func (r *routes) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") { // COOLDOWN_PROXY_ROUTE may list several
		if s = strings.TrimSpace(s); s != "" {
			*r = append(*r, s)
		}
	}
	return nil
}

type config struct {
	listen, cooldownd, tokenFile, fallbackFile, caFile, saltFile string
	logFormat, logLevel, configFile                              string
	routes                                                       routes
	mirror, version                                              bool
	shutdown, admitTimeout                                       time.Duration
}

func parse(args, env []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("cooldown-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8081", "address to listen on (loopback by default: the proxy is a sidecar)")
	fs.StringVar(&c.cooldownd, "cooldownd", "http://127.0.0.1:8080", "cooldownd URL, or several separated by commas")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token for cooldownd (or COOLDOWN_TOKEN)")
	fs.Var(&c.routes, "route", "PREFIX=UPSTREAM, repeatable: /openai=https://api.openai.com")
	fs.StringVar(&c.fallbackFile, "fallback-file", "", "YAML file of fallbacks per model (docs/proxy.md)")
	fs.BoolVar(&c.mirror, "mirror", true, "admit healthy calls from the client's mirror of cooldownd, without a round trip (the client's default; --mirror=false: every call asks cooldownd)")
	fs.StringVar(&c.caFile, "ca-file", "", "PEM file of extra CA certificates trusted for upstreams (besides the system's)")
	fs.StringVar(&c.saltFile, "salt-file", "", "file holding the connection-id salt shared with every other client (docs/keys.md)")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.configFile, "config", "", "YAML file of flag values")
	fs.DurationVar(&c.admitTimeout, "admit-timeout", client.DefaultAdmitTimeout, "bound of each call to cooldownd; past it the client decides in-process (fail open)")
	fs.DurationVar(&c.shutdown, "shutdown-timeout", 30*time.Second, "how long a SIGTERM waits for in-flight requests and streams")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	getenv := func(k string) string {
		for _, kv := range env {
			if n, v, ok := strings.Cut(kv, "="); ok && n == k {
				return v
			}
		}
		return ""
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || f.Name == "version" || err != nil {
			return
		}
		if v := getenv("COOLDOWN_PROXY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))); v != "" {
			set[f.Name] = true
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("COOLDOWN_PROXY_%s: %w", strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")), e)
			}
		}
	})
	if err != nil || c.configFile == "" {
		return c, err
	}
	b, err := os.ReadFile(c.configFile)
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(b, &file); err != nil {
		return c, fmt.Errorf("parse config %s: %w", c.configFile, err)
	}
	for name, v := range file {
		f := fs.Lookup(name)
		if f == nil || name == "config" || name == "version" {
			return c, fmt.Errorf("config %s: unknown key %q", c.configFile, name)
		}
		if set[name] {
			continue
		}
		vals := []any{v}
		if l, ok := v.([]any); ok {
			vals = l
		}
		for _, x := range vals {
			if err := fs.Set(name, fmt.Sprint(x)); err != nil {
				return c, fmt.Errorf("config %s: %s: %w", c.configFile, name, err)
			}
		}
	}
	return c, nil
}

func newLogger(c config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.logLevel))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			return slog.String(a.Key, a.Value.Duration().String())
		}
		return a
	}}
	if c.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func run(ctx context.Context, args, env []string, stdout, stderr io.Writer) error {
	c, err := parse(args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	build := buildinfo.Get()
	if c.version {
		_, err := fmt.Fprintln(stdout, "cooldown-proxy", build)
		return err
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return fmt.Errorf("--log-format %q: text or json", c.logFormat)
	}
	log := newLogger(c, stderr)

	var rs []proxy.Route
	for _, s := range c.routes {
		r, err := proxy.ParseRoute(s)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		return errors.New("no --route given (e.g. --route /openai=https://api.openai.com)")
	}
	var fb proxy.Fallbacks
	if c.fallbackFile != "" {
		if fb, err = proxy.LoadFallbacks(c.fallbackFile, rs); err != nil {
			return err
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return fmt.Errorf("read --ca-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--ca-file %s holds no PEM certificate", c.caFile)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	tr.MaxIdleConnsPerHost = 64

	opts := []client.Option{client.WithLogger(log.With("component", "client")), client.WithAdmitTimeout(c.admitTimeout)}
	token := strings.TrimSpace(func() string {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "COOLDOWN_TOKEN="); ok {
				return v
			}
		}
		return ""
	}())
	if c.tokenFile != "" {
		if token, err = readSecret(c.tokenFile); err != nil {
			return fmt.Errorf("read --token-file: %w", err)
		}
	}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	if c.saltFile != "" {
		salt, err := readSecret(c.saltFile)
		if err != nil {
			return fmt.Errorf("read --salt-file: %w", err)
		}
		opts = append(opts, client.WithSalt([]byte(salt)))
	}
	if !c.mirror {
		opts = append(opts, client.WithoutMirror())
	}
	cl, err := client.New(c.cooldownd, opts...)
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cooldown_proxy_build_info", Help: "The build of the proxy.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision}})
	info.Set(1)
	reg.MustRegister(info)
	px, err := proxy.New(proxy.Config{Client: cl, Routes: rs, Fallbacks: fb, Transport: tr, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/metrics" {
			mux.ServeHTTP(w, r)
			return
		}
		px.ServeHTTP(w, r)
	})

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		// No write timeout: a stream lasts as long as the provider sends.
	}
	attrs := []any{"addr", l.Addr().String(), "version", build.Version, "cooldownd", c.cooldownd, "mirror", c.mirror}
	for _, r := range rs {
		attrs = append(attrs, slog.String("route "+r.Prefix, r.Upstream.String()+" ("+r.Provider+")"))
	}
	log.Info("cooldown-proxy listening", attrs...)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(l) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", c.shutdown)
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdown)
	defer cancel()
	err = hs.Shutdown(sctx)
	if ferr := cl.Flush(sctx); ferr != nil && err == nil {
		err = ferr
	}
	log.Info("stopped")
	return err
}
