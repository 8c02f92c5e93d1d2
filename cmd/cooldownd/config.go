package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/store"
)

// config is everything cooldownd is started with.
type config struct {
	addr             string
	redis            redisConfig
	tokensFile       string
	tokensReload     time.Duration
	insecureNoAuth   bool
	tlsCertFile      string
	tlsKeyFile       string
	maxConnsTenant   int
	policyFile       string
	logLevel         string
	logFormat        string
	idleTTL          time.Duration
	reportKeyTTL     time.Duration
	coalesce         time.Duration // --coalesce-interval, 0: off
	peerAddress      string        // --coalesce-peer-address, "": no routing (decision 0064)
	peerTokenFile    string
	peerCAFile       string
	shutdownTimeout  time.Duration
	history          int
	policy           breaker.Policy
	redisTimeout     time.Duration
	readTimeout      time.Duration
	requestTimeout   time.Duration
	readyTimeout     time.Duration
	streamTimeout    time.Duration
	waitReplicas     int
	waitTimeout      time.Duration
	metricsAddr      string
	metricsTokenFile string
	corsOrigins      string
	otel             otelConfig
	version          bool
	// policyEnv and policyFlags are the knobs set by a COOLDOWND_*
	// variable and by a flag, so that an error names what was written.
	policyEnv, policyFlags []string
	// unknownEnv are COOLDOWND_* variables that set nothing (typos, or
	// settings of another version); run reports them.
	unknownEnv []string
}

// envName is the environment variable that sets a flag.
func envName(flagName string) string {
	return "COOLDOWND_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig reads flags, with COOLDOWND_* environment variables as
// defaults that flags override.
func parseConfig(args []string, env environ, stderr io.Writer) (config, error) {
	c := config{policy: breaker.DefaultPolicy()}
	fs := flag.NewFlagSet("cooldownd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "listen address (HTTP/1.1 and h2c on one port)")
	fs.StringVar(&c.redis.url, "redis-url", "", "Redis URL (redis://[user@]host:port/db, rediss:// for TLS); empty with no --redis-mode: an embedded in-memory Redis (single process, state lost on exit). Passwords: COOLDOWND_REDIS_PASSWORD or --redis-password-file, not the command line")
	fs.StringVar(&c.redis.mode, "redis-mode", "", "single, sentinel or cluster (empty: single when --redis-url is set)")
	fs.StringVar(&c.redis.addrs, "redis-addrs", "", "comma-separated addresses: the sentinels (sentinel mode) or some cluster nodes (cluster mode)")
	fs.StringVar(&c.redis.masterName, "redis-master-name", "", "the Sentinel master name")
	fs.StringVar(&c.redis.username, "redis-username", "", "Redis ACL user")
	fs.StringVar(&c.redis.passwordFile, "redis-password-file", "", "file holding the Redis password (overrides COOLDOWND_REDIS_PASSWORD)")
	fs.BoolVar(&c.redis.tls, "redis-tls", false, "use TLS to Redis (system roots unless --redis-tls-ca-file)")
	fs.StringVar(&c.redis.tlsCAFile, "redis-tls-ca-file", "", "PEM CA bundle to verify Redis with")
	fs.IntVar(&c.redis.db, "redis-db", 0, "Redis database (single and sentinel modes)")
	fs.StringVar(&c.tokensFile, "tokens-file", "", "YAML/JSON bearer tokens file (tenant + role per token); reloaded on change and on SIGHUP")
	fs.DurationVar(&c.tokensReload, "tokens-reload-interval", 5*time.Second, "how often the tokens file is checked for changes")
	fs.BoolVar(&c.insecureNoAuth, "insecure-no-auth", false, "serve without authentication on a non-loopback address (everyone is admin of the default tenant)")
	fs.StringVar(&c.tlsCertFile, "tls-cert-file", "", "serve TLS with this PEM certificate (reloaded on change)")
	fs.StringVar(&c.tlsKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&c.policyFile, "policy-file", "", "YAML policy overrides per tenant and label pattern, over these flags (see docs/policies.md)")
	fs.IntVar(&c.maxConnsTenant, "max-connections-per-tenant", 100000, "live connections a tenant may hold; more answer resource_exhausted")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.DurationVar(&c.idleTTL, "idle-ttl", 24*time.Hour, "how long an untouched connection's state is kept (at least this long after its last report, up to 9/8 of it)")
	fs.DurationVar(&c.reportKeyTTL, "report-key-ttl", store.DefaultReportKeyTTL, "how long a report's idempotency key is remembered: a client's resend within it is answered as the first send and counted once; at least the clients' report queue max age (1m by default)")
	fs.StringVar(&c.peerAddress, "coalesce-peer-address", "", "with --coalesce-interval: this replica's host:port as the other replicas reach it (a pod's IP and --addr's port); each connection's batches are then routed to one live replica, which merges every replica's before they reach Redis (decision 0064). Needs --coalesce-peer-token-file")
	fs.StringVar(&c.peerTokenFile, "coalesce-peer-token-file", "", "file holding the token every routing replica shares (at least 16 characters); it authenticates their PeerService calls")
	fs.StringVar(&c.peerCAFile, "coalesce-peer-ca-file", "", "with --tls-cert-file: PEM CA bundle to verify the other replicas' certificates with (system roots when empty)")
	fs.DurationVar(&c.coalesce, "coalesce-interval", 0, "merge the success reports of healthy connections for this long per connection before they reach Redis, one report of their sum per connection and interval (decision 0054); 0: off, else in [10ms, 5s]")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 20*time.Second, "how long SIGTERM waits for in-flight requests")
	fs.IntVar(&c.history, "history", 50, "transitions kept per connection")
	fs.DurationVar(&c.redisTimeout, "redis-timeout", 200*time.Millisecond, "bound of each Redis round trip (a request's shorter deadline wins); keep it under the clients' admit timeout (250ms)")
	fs.DurationVar(&c.readTimeout, "read-timeout", 5*time.Second, "a request's headers, then its body, must arrive within this")
	fs.DurationVar(&c.requestTimeout, "request-timeout", 10*time.Second, "bound of each unary RPC (a caller's shorter deadline wins); watch streams are not bounded")
	fs.DurationVar(&c.streamTimeout, "stream-write-timeout", 30*time.Second, "a watch stream whose client does not take a write within this is ended")
	fs.DurationVar(&c.readyTimeout, "readiness-timeout", time.Second, "/healthz and grpc health answer within this; keep it under the probes' timeoutSeconds")
	c.waitReplicas = waitReplicasAuto
	fs.Var(waitReplicasFlag{&c.waitReplicas}, "wait-replicas", "answer a report that makes a transition only once this many replicas have it (WAIT), else NOT_REPLICATED; 0: asynchronous replication; auto: every replica the master has at startup with Sentinel (at least 1) or a single Redis, 1 with Cluster, 0 on the embedded Redis (decision 0055, docs/reliability.md)")
	fs.DurationVar(&c.waitTimeout, "wait-timeout", store.DefaultReplicaTimeout, "with --wait-replicas: how long such a report waits before it is answered NOT_REPLICATED")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve /metrics on this address of its own instead of --addr (for example :9090, reachable by Prometheus only)")
	fs.StringVar(&c.metricsTokenFile, "metrics-token-file", "", "file holding the bearer token /metrics requires (it lists tenant names); empty: /metrics is open")
	fs.StringVar(&c.corsOrigins, "cors-origins", "", "comma-separated browser origins allowed to call the API cross-origin (https://app.example.com, or * for any); empty: no CORS")
	fs.StringVar(&c.otel.endpoint, "otlp-endpoint", "", "export traces over OTLP/HTTP to this collector (http://otel-collector:4318); empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT when set, else tracing is off (docs/observability.md)")
	fs.StringVar(&c.otel.service, "otel-service-name", "", "the traces' service.name (empty: OTEL_SERVICE_NAME, else cooldownd)")
	fs.StringVar(&c.otel.sampler, "otel-traces-sampler", "", "trace sampler, as OTEL_TRACES_SAMPLER (empty: that variable, else parentbased_always_on: a traced caller's choice is kept)")
	fs.StringVar(&c.otel.samplerArg, "otel-traces-sampler-arg", "", "the sampler's ratio for *traceidratio, as OTEL_TRACES_SAMPLER_ARG")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	for _, k := range breaker.Knobs() {
		fs.Var(&knobFlag{k: k, p: &c.policy}, k.Name, k.Doc)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: cooldownd [flags]\n\ncooldownd coordinates retries, cooldowns and recovery probes of LLM provider calls across processes.\nEvery flag can also be set by the environment variable shown; flags win.\n\n")
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name == "version" {
				fmt.Fprintf(stderr, "  --%s\n    \t%s\n", f.Name, f.Usage)
				return
			}
			fmt.Fprintf(stderr, "  --%s (env %s, default %q)\n    \t%s\n", f.Name, envName(f.Name), f.DefValue, f.Usage)
		})
	}
	var envErrs []error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "version" {
			return // an action, not a setting
		}
		if v := env.get(envName(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				envErrs = append(envErrs, fmt.Errorf("invalid %s=%q: expected %s", envName(f.Name), v, formatOf(f)))
			} else if _, ok := f.Value.(*knobFlag); ok {
				c.policyEnv = append(c.policyEnv, f.Name)
			}
		}
	})
	if len(envErrs) > 0 {
		return c, errors.Join(envErrs...)
	}
	c.unknownEnv = env.unknown(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	fs.Visit(func(f *flag.Flag) {
		if _, ok := f.Value.(*knobFlag); ok {
			c.policyFlags = append(c.policyFlags, f.Name)
		}
	})
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q%s", fs.Args(), boolValueHint(fs, args))
	}
	if c.version {
		return c, nil
	}
	if err := c.validate(); err != nil {
		return c, err
	}
	return c, c.otel.validate(env)
}

// knobFlag is the flag (and so the COOLDOWND_* variable) of a policy knob.
// A switch's flag is a bool flag: --shadow alone turns it on, --shadow=false
// off (as with every bool flag, "--shadow false" is --shadow and an
// argument, refused).
type knobFlag struct {
	k *breaker.Knob
	p *breaker.Policy
}

// IsBoolFlag tells the flag package that a switch's flag may stand alone.
func (f *knobFlag) IsBoolFlag() bool { return f.k != nil && f.k.Kind == breaker.Switch }

func (f *knobFlag) String() string {
	if f.k == nil { // the zero value flag.PrintDefaults makes
		return ""
	}
	return f.k.String(f.k.Get(*f.p))
}

func (f *knobFlag) Set(s string) error {
	v, err := f.k.Parse(s)
	if err != nil {
		return err
	}
	f.k.Set(f.p, v)
	return nil
}

// boolValueHint explains arguments left after a bool flag given its value
// as the next argument ("--shadow false"), which the flag package reads as
// "--shadow" and an argument "false".
func boolValueHint(fs *flag.FlagSet, args []string) string {
	i := len(args) - fs.NArg() - 1 // the argument before the first left over
	if i < 0 || i >= len(args) {
		return ""
	}
	name := strings.TrimLeft(args[i], "-")
	f := fs.Lookup(name)
	if f == nil || name == args[i] || strings.Contains(name, "=") {
		return ""
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
		return ""
	}
	if _, err := strconv.ParseBool(fs.Arg(0)); err != nil {
		return ""
	}
	return fmt.Sprintf(" (a true or false flag takes its value after an equals sign: --%s=%s)", name, fs.Arg(0))
}

// formatOf is what a flag's value must look like.
func formatOf(f *flag.Flag) string {
	if kf, ok := f.Value.(*knobFlag); ok {
		return kf.k.Format()
	}
	return expectedFormat(f)
}

// policyName names a knob the way the operator set it: by its variable
// when only COOLDOWND_* set it, else by its flag.
func (c config) policyName(k *breaker.Knob) string {
	if slices.Contains(c.policyEnv, k.Name) && !slices.Contains(c.policyFlags, k.Name) {
		return envName(k.Name)
	}
	return k.Flag()
}

func (c config) validate() error {
	var errs []error
	if err := c.policy.Validate(); err != nil {
		var pe *breaker.PolicyError
		if !errors.As(err, &pe) {
			return err
		}
		errs = append(errs, errors.New(pe.Message(c.policyName)))
	}
	switch c.logLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", c.logLevel))
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format must be text or json, got %q", c.logFormat))
	}
	if c.idleTTL < time.Minute {
		errs = append(errs, fmt.Errorf("--idle-ttl must be at least 1m, got %s", c.idleTTL))
	}
	if c.reportKeyTTL < time.Minute || c.reportKeyTTL > time.Hour {
		errs = append(errs, fmt.Errorf("--report-key-ttl must be in [1m, 1h] (at least the clients' report queue max age), got %s", c.reportKeyTTL))
	}
	if c.coalesce != 0 && (c.coalesce < 10*time.Millisecond || c.coalesce > 5*time.Second) {
		errs = append(errs, fmt.Errorf("--coalesce-interval must be 0 (off) or in [10ms, 5s], got %s", c.coalesce))
	}
	if c.peerAddress != "" {
		if c.coalesce == 0 {
			errs = append(errs, errors.New("--coalesce-peer-address needs --coalesce-interval: routing carries coalesced batches"))
		}
		if c.peerTokenFile == "" {
			errs = append(errs, errors.New("--coalesce-peer-address needs --coalesce-peer-token-file"))
		}
		if host, port, err := net.SplitHostPort(c.peerAddress); err != nil || host == "" || port == "" || port == "0" {
			errs = append(errs, fmt.Errorf("--coalesce-peer-address must be host:port, got %q", c.peerAddress))
		}
	} else if c.peerTokenFile != "" || c.peerCAFile != "" {
		errs = append(errs, errors.New("--coalesce-peer-token-file and --coalesce-peer-ca-file need --coalesce-peer-address"))
	}
	if c.history < 1 || c.history > 1000 {
		errs = append(errs, fmt.Errorf("--history must be in [1, 1000], got %d", c.history))
	}
	if err := c.redis.validate(); err != nil {
		errs = append(errs, err)
	}
	if (c.tlsCertFile == "") != (c.tlsKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file go together"))
	}
	if c.tokensFile != "" && c.insecureNoAuth {
		errs = append(errs, errors.New("--insecure-no-auth contradicts --tokens-file"))
	}
	if c.tokensReload < 100*time.Millisecond {
		errs = append(errs, errors.New("--tokens-reload-interval must be at least 100ms"))
	}
	if c.maxConnsTenant < 1 {
		errs = append(errs, errors.New("--max-connections-per-tenant must be positive"))
	}
	if c.waitReplicas != waitReplicasAuto && (c.waitReplicas < 0 || c.waitReplicas > 16) {
		errs = append(errs, fmt.Errorf("--wait-replicas must be in [0, 16] or auto, got %d", c.waitReplicas))
	}
	if (c.waitReplicas > 0 || c.waitReplicas == waitReplicasAuto && !c.redis.embedded()) && c.waitTimeout >= c.redisTimeout {
		errs = append(errs, fmt.Errorf("--wait-timeout (%s) must be shorter than --redis-timeout (%s), which bounds the WAIT too", c.waitTimeout, c.redisTimeout))
	}
	if c.waitReplicas > 0 && c.redis.embedded() {
		errs = append(errs, errors.New("--wait-replicas needs a real Redis with replicas (--redis-url or --redis-mode)"))
	}
	if c.metricsAddr != "" && c.metricsAddr == c.addr && !strings.HasSuffix(c.addr, ":0") {
		errs = append(errs, errors.New("--metrics-addr must differ from --addr (leave it empty to serve /metrics on --addr)"))
	}
	for _, o := range splitList(c.corsOrigins) {
		if err := checkCORSOrigin(o); err != nil {
			errs = append(errs, err)
		}
	}
	if c.shutdownTimeout <= 0 {
		errs = append(errs, errors.New("--shutdown-timeout must be positive"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--redis-timeout", c.redisTimeout}, {"--read-timeout", c.readTimeout}, {"--request-timeout", c.requestTimeout},
		{"--readiness-timeout", c.readyTimeout}, {"--wait-timeout", c.waitTimeout}, {"--stream-write-timeout", c.streamTimeout}} {
		if d.v < time.Millisecond {
			errs = append(errs, fmt.Errorf("%s must be at least 1ms, got %s", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

// checkCORSOrigin accepts "*" or scheme://host[:port], as browsers send
// the Origin header.
func checkCORSOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("--cors-origins: %q must be * or scheme://host[:port] with no path, such as https://app.example.com", o)
	}
	return nil
}
