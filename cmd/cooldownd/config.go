package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// config is everything cooldownd is started with.
type config struct {
	addr            string
	redisURL        string
	logLevel        string
	logFormat       string
	idleTTL         time.Duration
	shutdownTimeout time.Duration
	history         int
	policy          breaker.Policy
}

// envName is the environment variable that sets a flag.
func envName(flagName string) string {
	return "COOLDOWND_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig reads flags, with COOLDOWND_* environment variables as
// defaults that flags override.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{policy: breaker.DefaultPolicy()}
	fs := flag.NewFlagSet("cooldownd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "listen address (HTTP/1.1 and h2c on one port)")
	fs.StringVar(&c.redisURL, "redis-url", "", "Redis URL (redis://[user:password@]host:port/db or rediss:// for TLS); empty: an embedded in-memory Redis (single process, state lost on exit)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.DurationVar(&c.idleTTL, "idle-ttl", 24*time.Hour, "how long an untouched connection's state is kept")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 20*time.Second, "how long SIGTERM waits for in-flight requests")
	fs.IntVar(&c.history, "history", 50, "transitions kept per connection")
	p := &c.policy
	fs.IntVar(&p.ConsecutiveFailures, "consecutive-failures", p.ConsecutiveFailures, "trip after this many consecutive transient failures (0 disables)")
	fs.Float64Var(&p.FailureRate, "failure-rate", p.FailureRate, "trip when the failure rate over --window reaches this, in (0,1] (0 disables)")
	fs.IntVar(&p.MinCalls, "min-calls", p.MinCalls, "calls the window must hold before --failure-rate applies")
	fs.DurationVar(&p.Window, "window", p.Window, "sliding window of the failure-rate rule (at most 10m)")
	fs.DurationVar(&p.OpenBase, "open-base", p.OpenBase, "first breaker open duration; doubles per consecutive re-open")
	fs.DurationVar(&p.OpenMax, "open-max", p.OpenMax, "cap of breaker open durations")
	fs.Float64Var(&p.Jitter, "jitter", p.Jitter, "± fraction of jitter on breaker opens, in [0,1) (0 disables)")
	fs.DurationVar(&p.RateLimitDefault, "rate-limit-cooldown", p.RateLimitDefault, "shared cooldown after a 429 without Retry-After (0 disables)")
	fs.DurationVar(&p.OverloadFloor, "overload-floor", p.OverloadFloor, "least cooldown after an overloaded answer (0 disables)")
	fs.DurationVar(&p.QuotaBlock, "quota-block", p.QuotaBlock, "block after an exhausted quota (0 disables)")
	fs.DurationVar(&p.AuthBlock, "auth-block", p.AuthBlock, "block after a rejected credential (0 disables)")
	fs.IntVar(&p.MaxProbes, "max-probes", p.MaxProbes, "probe leases a half-open connection grants at once (1-16)")
	fs.DurationVar(&p.LeaseTTL, "lease-ttl", p.LeaseTTL, "probe lease time to live unless extended")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: cooldownd [flags]\n\ncooldownd coordinates retries, cooldowns and recovery probes of LLM provider calls across processes.\nEvery flag can also be set by the environment variable shown; flags win.\n\n")
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(stderr, "  --%s (env %s, default %q)\n    \t%s\n", f.Name, envName(f.Name), f.DefValue, f.Usage)
		})
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("invalid %s: %w", envName(f.Name), err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return c, c.validate()
}

// policyFlagNames maps the field names in breaker.Policy.Validate's errors
// to the flags that set them.
var policyFlagNames = strings.NewReplacer(
	"breaker: invalid policy: ", "",
	"consecutive_failures", "--consecutive-failures",
	"failure_rate", "--failure-rate",
	"min_calls", "--min-calls",
	"window", "--window",
	"open_base", "--open-base",
	"open_max", "--open-max",
	"jitter", "--jitter",
	"rate_limit_default", "--rate-limit-cooldown",
	"overload_floor", "--overload-floor",
	"quota_block", "--quota-block",
	"auth_block", "--auth-block",
	"max_probes", "--max-probes",
	"lease_ttl", "--lease-ttl",
)

func (c config) validate() error {
	var errs []error
	if err := c.policy.Validate(); err != nil {
		// Name the flags an operator sets, not the policy's field names.
		errs = append(errs, errors.New(policyFlagNames.Replace(err.Error())))
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
	if c.history < 1 || c.history > 1000 {
		errs = append(errs, fmt.Errorf("--history must be in [1, 1000], got %d", c.history))
	}
	if c.shutdownTimeout <= 0 {
		errs = append(errs, errors.New("--shutdown-timeout must be positive"))
	}
	return errors.Join(errs...)
}

var _ = os.Getenv
