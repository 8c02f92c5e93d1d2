package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/store"
)

// envOf returns an environment of a fixed map, so the tests never read the real
// environment.
func envOf(kv map[string]string) environ {
	var e environ
	for k, v := range kv {
		e = append(e, k+"="+v)
	}
	return e
}

// defaults parses an empty command line with an empty environment.
func defaults(t *testing.T) config {
	t.Helper()
	c, err := parseConfig(nil, envOf(nil), io.Discard)
	require.NoError(t, err)
	return c
}

func TestParseConfigDefaults(t *testing.T) {
	t.Parallel()
	c := defaults(t)
	assert.Equal(t, "127.0.0.1:8080", c.addr, "loopback by default")
	assert.True(t, c.redis.embedded(), "no Redis configured: the embedded one")
	assert.Equal(t, "info", c.logLevel)
	assert.Equal(t, "text", c.logFormat)
	assert.Equal(t, 24*time.Hour, c.idleTTL)
	assert.Equal(t, store.DefaultReportKeyTTL, c.reportKeyTTL)
	assert.GreaterOrEqual(t, c.reportKeyTTL, client.DefaultReportQueueMaxAge, "a resend the queue sends at the end of its report's life still finds the key")
	assert.Equal(t, 20*time.Second, c.shutdownTimeout)
	assert.Equal(t, 50, c.history)
	assert.Equal(t, breaker.DefaultPolicy(), c.policy)
	assert.Empty(t, c.tokensFile)
	assert.False(t, c.insecureNoAuth)
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(*config)
	}{
		{"flags", []string{
			"--addr", ":9090", "--redis-url", "redis://cache:6379/2", "--redis-db", "3", "--log-level", "debug", "--log-format", "json",
			"--idle-ttl", "2h", "--shutdown-timeout", "5s", "--history", "10",
			"--consecutive-failures", "0", "--failure-rate", "0.25", "--min-calls", "7", "--window", "30s",
			"--open-base", "1s", "--open-max", "1m", "--jitter", "0", "--rate-limit-cooldown", "3s",
			"--overload-floor", "0", "--quota-block", "2h", "--auth-block", "1m", "--max-probes", "3", "--lease-ttl", "10s",
			"--retry-budget", "0.1", "--retry-budget-min", "7", "--throttle-k", "2", "--trip-quorum", "3", "--fleet-window", "10s",
			"--shadow",
		}, nil, func(c *config) {
			c.addr, c.redis.url, c.redis.db, c.logLevel, c.logFormat = ":9090", "redis://cache:6379/2", 3, "debug", "json"
			c.idleTTL, c.shutdownTimeout, c.history = 2*time.Hour, 5*time.Second, 10
			c.policy = breaker.Policy{
				ConsecutiveFailures: 0, FailureRate: 0.25, MinCalls: 7, Window: 30 * time.Second,
				OpenBase: time.Second, OpenMax: time.Minute, Jitter: 0, RateLimitCooldown: 3 * time.Second,
				OverloadFloor: 0, QuotaBlock: 2 * time.Hour, AuthBlock: time.Minute, MaxProbes: 3, LeaseTTL: 10 * time.Second,
				RetryBudget: 0.1, RetryBudgetMin: 7, ThrottleK: 2, TripQuorum: 3, FleetWindow: 10 * time.Second, Shadow: true,
				LeaseTTLMax: 10 * time.Minute,
			}
		}},
		{"a switch alone is on", []string{"--shadow"}, nil, func(c *config) { c.policy.Shadow = true }},
		{"a switch with =true", []string{"--shadow=true"}, nil, func(c *config) { c.policy.Shadow = true }},
		{"a switch with =false", []string{"--shadow=false"}, nil, func(c *config) {}},
		{"a switch with =1", []string{"-shadow=1"}, nil, func(c *config) { c.policy.Shadow = true }},
		{"a switch from env", nil, map[string]string{"COOLDOWND_SHADOW": "true"}, func(c *config) { c.policy.Shadow = true }},
		{"a switch env false", nil, map[string]string{"COOLDOWND_SHADOW": "false"}, func(c *config) {}},
		{"a switch flag off beats env on", []string{"--shadow=false"}, map[string]string{"COOLDOWND_SHADOW": "true"}, func(c *config) {}},
		{"a switch flag on beats env off", []string{"--shadow"}, map[string]string{"COOLDOWND_SHADOW": "false"}, func(c *config) { c.policy.Shadow = true }},
		{"a switch then another flag", []string{"--shadow", "--max-probes", "2"}, nil, func(c *config) {
			c.policy.Shadow, c.policy.MaxProbes = true, 2
		}},
		{"single dash flags", []string{"-addr", ":1", "-max-probes=2"}, nil, func(c *config) {
			c.addr, c.policy.MaxProbes = ":1", 2
		}},
		{"env", nil, map[string]string{
			"COOLDOWND_ADDR": "0.0.0.0:80", "COOLDOWND_REDIS_URL": "redis://r:6379", "COOLDOWND_MAX_PROBES": "4",
			"COOLDOWND_RATE_LIMIT_COOLDOWN": "5s", "COOLDOWND_LOG_FORMAT": "json", "COOLDOWND_JITTER": "0.2",
		}, func(c *config) {
			c.addr, c.redis.url, c.logFormat = "0.0.0.0:80", "redis://r:6379", "json"
			c.policy.MaxProbes, c.policy.RateLimitCooldown, c.policy.Jitter = 4, 5*time.Second, 0.2
		}},
		{"flags beat env", []string{"--addr", "127.0.0.1:2", "--max-probes", "2"}, map[string]string{
			"COOLDOWND_ADDR": "127.0.0.1:1", "COOLDOWND_MAX_PROBES": "9", "COOLDOWND_HISTORY": "7",
		}, func(c *config) {
			c.addr, c.policy.MaxProbes, c.history = "127.0.0.1:2", 2, 7
		}},
		{"unrelated env ignored", nil, map[string]string{"ADDR": ":1", "COOLDOWN_ADDR": ":2", "cooldownd_addr": ":3"}, func(*config) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			got, err := parseConfig(tt.args, envOf(tt.env), &stderr)
			require.NoError(t, err)
			want := defaults(t)
			tt.want(&want)
			got.policyEnv, got.policyFlags = nil, nil // where each knob came from: TestPolicyKnobErrors
			assert.Equal(t, want, got)
			assert.Empty(t, stderr.String())
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		names []string // what the error must name
	}{
		{"bad duration env", nil, map[string]string{"COOLDOWND_OPEN_BASE": "soon"}, []string{"COOLDOWND_OPEN_BASE", `"soon"`, "a duration such as"}},
		{"bad int env", nil, map[string]string{"COOLDOWND_MAX_PROBES": "many"}, []string{"COOLDOWND_MAX_PROBES", `"many"`, "an integer"}},
		{"bad float env", nil, map[string]string{"COOLDOWND_JITTER": "lots"}, []string{"COOLDOWND_JITTER", `"lots"`, "a number"}},
		{"bad bool env", nil, map[string]string{"COOLDOWND_REDIS_TLS": "maybe"}, []string{"COOLDOWND_REDIS_TLS", `"maybe"`, "true or false"}},
		{"bad switch env", nil, map[string]string{"COOLDOWND_SHADOW": "yes"}, []string{`invalid COOLDOWND_SHADOW="yes": expected true or false`}},
		{"bad switch flag", []string{"--shadow=on"}, nil, []string{`"on" is not true or false`, "-shadow"}},
		{"switch value as the next argument", []string{"--shadow", "false"}, nil, []string{`unexpected arguments: ["false"]`, "--shadow=false"}},
		{"empty redis addrs", []string{"--redis-mode", "single", "--redis-addrs", ","}, nil, []string{"--redis-addrs", "names no address"}},
		{"blank redis addrs", []string{"--redis-mode", "cluster", "--redis-addrs", " , "}, nil, []string{"--redis-addrs", "names no address"}},
		{"redis addr without port", []string{"--redis-mode", "sentinel", "--redis-master-name", "m", "--redis-addrs", "s1,s2:26379"}, nil, []string{"--redis-addrs", `"s1"`, "host:port"}},
		{"two single addrs", []string{"--redis-mode", "single", "--redis-addrs", "a:1,b:2"}, nil, []string{"--redis-mode single takes one address"}},
		{"redis timeout", []string{"--redis-timeout", "0s"}, nil, []string{"--redis-timeout"}},
		{"read timeout", []string{"--read-timeout", "0s"}, nil, []string{"--read-timeout"}},
		{"wait replicas embedded", []string{"--wait-replicas", "1"}, nil, []string{"--wait-replicas needs a real Redis"}},
		{"wait timeout over redis timeout", []string{"--wait-replicas", "1", "--wait-timeout", "300ms", "--redis-url", "redis://r:6379"}, nil, []string{"--wait-timeout", "shorter than --redis-timeout"}},
		{"wait replicas negative", []string{"--wait-replicas", "-1", "--redis-url", "redis://r:6379"}, nil, []string{"--wait-replicas must be in [0, 16]"}},
		{"invalid env value", nil, map[string]string{"COOLDOWND_MAX_PROBES": "0"}, []string{"COOLDOWND_MAX_PROBES must be in [1, 16], got 0"}},
		{"invalid flag over env", []string{"--max-probes", "0"}, map[string]string{"COOLDOWND_MAX_PROBES": "2"}, []string{"--max-probes must be in [1, 16], got 0"}},
		{"env and flag in one rule", []string{"--open-max", "1s"}, map[string]string{"COOLDOWND_OPEN_BASE": "1m"}, []string{"--open-max (1s) must be at least COOLDOWND_OPEN_BASE (1m0s)"}},
		{"bad duration flag", []string{"--lease-ttl", "forever"}, nil, []string{"lease-ttl", "forever"}},
		{"jitter 1", []string{"--jitter", "1"}, nil, []string{"--jitter", "[0, 1)"}},
		{"jitter negative", []string{"--jitter=-0.1"}, nil, []string{"--jitter"}},
		{"max-probes 0", []string{"--max-probes", "0"}, nil, []string{"--max-probes", "got 0"}},
		{"max-probes 17", []string{"--max-probes", "17"}, nil, []string{"--max-probes"}},
		{"open-max under open-base", []string{"--open-base", "1m", "--open-max", "1s"}, nil, []string{"--open-max", "--open-base"}},
		{"rate limit cooldown negative", []string{"--rate-limit-cooldown", "-1s"}, nil, []string{"--rate-limit-cooldown"}},
		{"failure rate over 1", []string{"--failure-rate", "1.5"}, nil, []string{"--failure-rate"}},
		{"sub-millisecond lease", []string{"--lease-ttl", "1500us"}, nil, []string{"--lease-ttl", "whole milliseconds"}},
		{"log level", []string{"--log-level", "loud"}, nil, []string{"--log-level", "loud"}},
		{"log format", []string{"--log-format", "xml"}, nil, []string{"--log-format", "xml"}},
		{"idle ttl", []string{"--idle-ttl", "1s"}, nil, []string{"--idle-ttl"}},
		{"report key ttl under the queue's max age", []string{"--report-key-ttl", "30s"}, nil, []string{"--report-key-ttl", "30s"}},
		{"report key ttl over an hour", []string{"--report-key-ttl", "2h"}, nil, []string{"--report-key-ttl", "2h"}},
		{"history", []string{"--history", "0"}, nil, []string{"--history"}},
		{"shutdown timeout", []string{"--shutdown-timeout", "0s"}, nil, []string{"--shutdown-timeout"}},
		{"unknown flag", []string{"--colour"}, nil, []string{"colour"}},
		{"unexpected args", []string{"--addr", ":1", "serve", "now"}, nil, []string{"unexpected arguments", "serve"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseConfig(tt.args, envOf(tt.env), io.Discard)
			require.Error(t, err)
			for _, n := range tt.names {
				assert.Contains(t, err.Error(), n)
			}
		})
	}
}

// TestParseConfigSeveralErrors: every invalid value is reported at once.
func TestParseConfigSeveralErrors(t *testing.T) {
	t.Parallel()
	_, err := parseConfig([]string{"--log-level", "loud", "--log-format", "xml", "--max-probes", "0"}, envOf(nil), io.Discard)
	require.Error(t, err)
	for _, n := range []string{"--log-level", "--log-format", "--max-probes"} {
		assert.Contains(t, err.Error(), n)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h"} {
		t.Run(arg, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			_, err := parseConfig([]string{arg}, envOf(nil), &stderr)
			require.ErrorIs(t, err, flag.ErrHelp)
			out := stderr.String()
			assert.Contains(t, out, "Usage: cooldownd")

			documented := map[string]bool{}
			for _, m := range regexp.MustCompile(`(?m)^  --([a-z-]+) \(env (COOLDOWND_[A-Z_]+), default "[^"]*"\)\n    \t\S`).FindAllStringSubmatch(out, -1) {
				assert.Equal(t, envName(m[1]), m[2])
				documented[m[1]] = true
			}
			names := []string{"addr", "redis-url", "log-level", "log-format", "idle-ttl", "report-key-ttl", "shutdown-timeout", "history"}
			for _, k := range breaker.Knobs() {
				names = append(names, k.Name)
				assert.Contains(t, out, "  --"+k.Name+" (env "+envName(k.Name)+`, default "`+k.String(k.Get(breaker.DefaultPolicy()))+"\")\n    \t"+k.Doc+"\n")
			}
			for _, name := range names {
				assert.True(t, documented[name], "--%s with its env name and a description in --help", name)
			}
			// Every flag the set defines is documented that way.
			fs := regexp.MustCompile(`(?m)^  --([a-z-]+) `).FindAllStringSubmatch(out, -1)
			assert.Len(t, documented, len(fs))
		})
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "COOLDOWND_REDIS_URL", envName("redis-url"))
	assert.Equal(t, "COOLDOWND_ADDR", envName("addr"))
}

// TestHelpDefaultsNotFromEnv: --help shows built-in defaults, never values
// from the environment (which may hold a Redis password).
func TestHelpDefaultsNotFromEnv(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	_, err := parseConfig([]string{"--help"}, envOf(map[string]string{"COOLDOWND_REDIS_URL": "redis://:s3cret@r:6379"}), &stderr)
	require.True(t, errors.Is(err, flag.ErrHelp))
	assert.NotContains(t, stderr.String(), "s3cret")
}

// TestUnknownEnvironment: a COOLDOWND_* variable that sets nothing (a typo,
// or a setting of another version) is reported; the ones cooldownd reads
// and those Kubernetes injects for a Service named cooldownd are not.
func TestUnknownEnvironment(t *testing.T) {
	t.Parallel()
	c, err := parseConfig(nil, environ{
		"COOLDOWND_IDEL_TTL=1h", "COOLDOWND_IDLE_TTL=2h", "COOLDOWND_REDIS_PASSWORD=x", "COOLDOWND_TOKEN=y",
		"COOLDOWND_PORT=tcp://10.0.0.1:8080", "COOLDOWND_PORT_8080_TCP_ADDR=10.0.0.1", "COOLDOWND_SERVICE_HOST=10.0.0.1",
		"COOLDOWND_SERVICE_PORT_HTTP=8080", "COOLDOWND_REDIS_SERVICE_HOST=10.0.0.2", "COOLDOWND_LOG_LEVLE=debug", "HOME=/root",
		"COOLDOWND_VERSION=1", // --version is an action: no variable sets it
	}, io.Discard)
	require.NoError(t, err)
	assert.False(t, c.version)
	assert.Equal(t, []string{"COOLDOWND_IDEL_TTL", "COOLDOWND_LOG_LEVLE", "COOLDOWND_VERSION"}, c.unknownEnv)
	assert.Equal(t, 2*time.Hour, c.idleTTL)
}

func TestRunReportsUnknownEnvironment(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0"}, environ{"COOLDOWND_OPEN_BAS=1s"}, io.Discard, logs, ready)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	cancel()
	require.NoError(t, <-done)
	assert.Contains(t, logs.String(), "unknown environment variable")
	assert.Contains(t, logs.String(), "COOLDOWND_OPEN_BAS")
}

// TestParseEnvNeverPanics: no value of any variable makes parseConfig
// panic.
func TestParseEnvNeverPanics(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"COOLDOWND_REDIS_ADDRS", "COOLDOWND_REDIS_MODE", "COOLDOWND_REDIS_URL", "COOLDOWND_REDIS_MASTER_NAME"} {
		for _, v := range []string{",", " ", ",,", ":", "::", "single", "sentinel", "cluster", "redis://"} {
			env := environ{name + "=" + v, "COOLDOWND_REDIS_MODE=single"}
			assert.NotPanics(t, func() {
				if c, err := parseConfig(nil, env, io.Discard); err == nil && !c.redis.embedded() {
					if rdb, _, err := c.redis.client(env.get); err == nil {
						_ = rdb.Close()
					}
				}
			}, "%s=%q", name, v)
		}
	}
}

// badValue is a value outside k's own bounds; a switch has none (true
// and false are both valid), ok is false then.
func badValue(k *breaker.Knob) (v string, ok bool) {
	switch k.Kind {
	case breaker.Count:
		return k.String(k.Max + 1), true
	case breaker.Ratio:
		return k.String(k.Max + 0.5), true
	case breaker.Switch:
		return "", false
	default:
		return "-1s", true
	}
}

// goodValue is a valid value of k that is not its default.
func goodValue(k *breaker.Knob) float64 {
	switch {
	case k.Name == "throttle-k":
		return 2.5 // 0 (off) or 1 to 10
	case k.Kind == breaker.Count:
		return k.Min + 1
	case k.Kind == breaker.Ratio:
		return 0.375
	case k.Kind == breaker.Switch:
		return 1 - k.Get(breaker.DefaultPolicy())
	default:
		return float64(11 * time.Second)
	}
}

// TestPolicyKnobs: every knob of the table is a flag and a COOLDOWND_*
// variable, sets its own field, and its errors name the flag or the
// variable, whichever the operator wrote; never a Go field or file key.
func TestPolicyKnobs(t *testing.T) {
	t.Parallel()
	for _, k := range breaker.Knobs() {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			def := breaker.DefaultPolicy()
			good := goodValue(k)
			want := def
			k.Set(&want, good)
			require.NotEqual(t, def, want, "the value is not the default: the test sees it set")
			for _, src := range []struct {
				args []string
				env  map[string]string
			}{
				{[]string{"--" + k.Name + "=" + k.String(good)}, nil}, // = works for every kind, a switch too
				{nil, map[string]string{envName(k.Name): k.String(good)}},
			} {
				c, err := parseConfig(src.args, envOf(src.env), io.Discard)
				require.NoError(t, err)
				assert.Equal(t, want, c.policy)
			}

			if bad, ok := badValue(k); ok {
				_, err := parseConfig([]string{"--" + k.Name, bad}, envOf(nil), io.Discard)
				require.Error(t, err)
				assert.True(t, strings.HasPrefix(err.Error(), "--"+k.Name+" must "), "%v", err)

				_, err = parseConfig(nil, envOf(map[string]string{envName(k.Name): bad}), io.Discard)
				require.Error(t, err)
				assert.True(t, strings.HasPrefix(err.Error(), envName(k.Name)+" must "), "%v", err)
				assert.NotContains(t, err.Error(), k.Key())
			}

			_, err := parseConfig(nil, envOf(map[string]string{envName(k.Name): "x"}), io.Discard)
			require.Error(t, err)
			assert.Equal(t, "invalid "+envName(k.Name)+`="x": expected `+k.Format(), err.Error())
		})
	}
}
