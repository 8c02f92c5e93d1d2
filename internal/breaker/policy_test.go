package breaker

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultPolicyValidates(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	require.NoError(t, p.Validate())
	assert.Equal(t, Policy{
		ConsecutiveFailures: 5, FailureRate: 0.5, MinCalls: 20, Window: time.Minute,
		OpenBase: 10 * time.Second, OpenMax: 5 * time.Minute, Jitter: 0.1,
		RateLimitCooldown: 2 * time.Second, OverloadFloor: 5 * time.Second,
		QuotaBlock: time.Hour, AuthBlock: 5 * time.Minute, MaxProbes: 1, LeaseTTL: 30 * time.Second, LeaseTTLMax: 10 * time.Minute,
		RetryBudget: 0.2, RetryBudgetMin: 3, FleetWindow: 30 * time.Second,
	}, p, "the documented defaults")
}

func TestPolicyValidateAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(p *Policy)
	}{
		{"failure rate 1", func(p *Policy) { p.FailureRate = 1 }},
		{"failure rate off ignores min_calls and window", func(p *Policy) { p.FailureRate, p.MinCalls, p.Window = 0, 0, 0 }},
		{"failure rate off ignores a long window", func(p *Policy) { p.FailureRate, p.Window = 0, time.Hour }},
		{"consecutive failures off", func(p *Policy) { p.ConsecutiveFailures = 0 }},
		{"consecutive failures at MaxCount", func(p *Policy) { p.ConsecutiveFailures = MaxCount }},
		{"window exactly 10m", func(p *Policy) { p.Window = MaxWindow }},
		{"window 1ms", func(p *Policy) { p.Window = time.Millisecond }},
		{"jitter 0", func(p *Policy) { p.Jitter = 0 }},
		{"jitter just below 1", func(p *Policy) { p.Jitter = 0.999 }},
		{"max_probes 16", func(p *Policy) { p.MaxProbes = MaxProbes }},
		{"open_max equal to open_base", func(p *Policy) { p.OpenMax = p.OpenBase }},
		{"every cooldown off", func(p *Policy) { p.RateLimitCooldown, p.OverloadFloor, p.QuotaBlock, p.AuthBlock = 0, 0, 0, 0 }},
		{"durations at MaxDuration", func(p *Policy) { p.OpenMax, p.QuotaBlock = MaxDuration, MaxDuration }},
		{"sub-second durations", func(p *Policy) {
			p.Window, p.OpenBase, p.OpenMax, p.LeaseTTL = time.Second, 100*time.Millisecond, 1600*time.Millisecond, 300*time.Millisecond
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy()
			tt.edit(&p)
			assert.NoError(t, p.Validate())
		})
	}
}

func TestPolicyValidateRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(p *Policy)
		field string // the field the error names first
	}{
		{"negative window", func(p *Policy) { p.Window = -time.Second }, "window"},
		{"negative open_base", func(p *Policy) { p.OpenBase = -time.Second }, "open_base"},
		{"negative open_max", func(p *Policy) { p.OpenMax = -time.Second }, "open_max"},
		{"negative rate_limit_cooldown", func(p *Policy) { p.RateLimitCooldown = -time.Millisecond }, "rate_limit_cooldown"},
		{"negative overload_floor", func(p *Policy) { p.OverloadFloor = -time.Millisecond }, "overload_floor"},
		{"negative quota_block", func(p *Policy) { p.QuotaBlock = -time.Hour }, "quota_block"},
		{"negative auth_block", func(p *Policy) { p.AuthBlock = -time.Minute }, "auth_block"},
		{"negative lease_ttl", func(p *Policy) { p.LeaseTTL = -time.Second }, "lease_ttl"},
		{"window not whole ms", func(p *Policy) { p.Window = time.Minute + time.Microsecond }, "window"},
		{"open_base not whole ms", func(p *Policy) { p.OpenBase = 1500 * time.Microsecond }, "open_base"},
		{"rate_limit_cooldown not whole ms", func(p *Policy) { p.RateLimitCooldown = time.Nanosecond }, "rate_limit_cooldown"},
		{"lease_ttl not whole ms", func(p *Policy) { p.LeaseTTL = 30*time.Second + 1 }, "lease_ttl"},
		{"quota_block above MaxDuration", func(p *Policy) { p.QuotaBlock = MaxDuration + time.Millisecond }, "quota_block"},
		{"negative consecutive_failures", func(p *Policy) { p.ConsecutiveFailures = -1 }, "consecutive_failures"},
		{"consecutive_failures above MaxCount", func(p *Policy) { p.ConsecutiveFailures = MaxCount + 1 }, "consecutive_failures"},
		{"negative failure_rate", func(p *Policy) { p.FailureRate = -0.1 }, "failure_rate"},
		{"failure_rate above 1", func(p *Policy) { p.FailureRate = 1.01 }, "failure_rate"},
		{"failure_rate NaN", func(p *Policy) { p.FailureRate = math.NaN() }, "failure_rate"},
		{"failure_rate +Inf", func(p *Policy) { p.FailureRate = math.Inf(1) }, "failure_rate"},
		{"min_calls 0 with the rate rule on", func(p *Policy) { p.MinCalls = 0 }, "min_calls"},
		{"min_calls above MaxCount", func(p *Policy) { p.MinCalls = MaxCount + 1 }, "min_calls"},
		{"window 0 with the rate rule on", func(p *Policy) { p.Window = 0 }, "window"},
		{"window above 10m", func(p *Policy) { p.Window = MaxWindow + time.Millisecond }, "window"},
		{"open_base 0", func(p *Policy) { p.OpenBase = 0 }, "open_base"},
		{"open_max below open_base", func(p *Policy) { p.OpenMax = p.OpenBase - time.Millisecond }, "open_max"},
		{"jitter 1", func(p *Policy) { p.Jitter = 1 }, "jitter"},
		{"jitter above 1", func(p *Policy) { p.Jitter = 1.5 }, "jitter"},
		{"negative jitter", func(p *Policy) { p.Jitter = -0.1 }, "jitter"},
		{"jitter NaN", func(p *Policy) { p.Jitter = math.NaN() }, "jitter"},
		{"max_probes 0", func(p *Policy) { p.MaxProbes = 0 }, "max_probes"},
		{"max_probes 17", func(p *Policy) { p.MaxProbes = MaxProbes + 1 }, "max_probes"},
		{"negative max_probes", func(p *Policy) { p.MaxProbes = -1 }, "max_probes"},
		{"lease_ttl 0", func(p *Policy) { p.LeaseTTL = 0 }, "lease_ttl"},
	}
	const prefix = "breaker: invalid policy: "
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy()
			tt.edit(&p)
			err := p.Validate()
			require.ErrorIs(t, err, ErrInvalidPolicy)
			msg := err.Error()
			require.True(t, strings.HasPrefix(msg, prefix), "message %q", msg)
			assert.True(t, strings.HasPrefix(msg, prefix+tt.field+" "), "message %q names %s first", msg, tt.field)
		})
	}
}

func TestRateBasisPoints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rate float64
		want int64
	}{
		{"disabled", 0, 0},
		{"half", 0.5, 5000},
		{"all", 1, 10000},
		{"a third rounds", 1.0 / 3, 3333},
		{"two thirds rounds up", 2.0 / 3, 6667},
		{"smallest", 0.0001, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, Policy{FailureRate: tt.rate}.RateBasisPoints())
		})
	}
}
