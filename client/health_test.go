package client

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
)

// TestHealthHysteresis runs the degradation rule on a scripted clock.
func TestHealthHysteresis(t *testing.T) {
	t.Parallel()
	type step struct {
		at      time.Duration // since the start
		fail    []int         // endpoints tried; nil: a success
		wantDeg bool
	}
	f := func(at time.Duration, deg bool, eps ...int) step {
		if eps == nil {
			eps = []int{0}
		}
		return step{at: at, fail: eps, wantDeg: deg}
	}
	ok := func(at time.Duration) step { return step{at: at} }
	tests := []struct {
		name      string
		endpoints int
		steps     []step
	}{
		{name: "three in a row degrade", endpoints: 1, steps: []step{f(0, false), f(time.Second, false), f(2*time.Second, true)}},
		{name: "a success in between resets", endpoints: 1, steps: []step{f(0, false), f(1, false), ok(2), f(3, false), f(4, false), f(5, true)}},
		{name: "spread beyond the window never degrades", endpoints: 1, steps: []step{f(0, false), f(6*time.Second, false), f(11*time.Second, false), f(17*time.Second, false)}},
		{name: "one success comes back", endpoints: 1, steps: []step{f(0, false), f(1, false), f(2, true), f(3, true), ok(4), f(5, false)}},
		{name: "one dead endpoint of two never degrades", endpoints: 2, steps: []step{f(0, false), f(1, false), f(2, false), f(3, false)}},
		{name: "both endpoints dead degrade", endpoints: 2, steps: []step{f(0, false, 0, 1), f(1, false, 1, 0), f(2, true, 0, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := defaultConfig()
			ups, downs, wantDowns := 0, 0, 0
			h := newHealth(cfg, tt.endpoints, slog.New(slog.DiscardHandler), func() { downs++ }, func() { ups++ })
			t0 := time.Unix(1_000_000, 0)
			err := connect.NewError(connect.CodeUnavailable, errors.New("down"))
			for i, s := range tt.steps {
				was := h.isDegraded()
				if s.fail == nil {
					h.success()
				} else {
					h.failure(t0.Add(s.at), "admit", s.fail, err)
				}
				assert.Equal(t, s.wantDeg, h.isDegraded(), "after step %d", i)
				if !was && s.wantDeg {
					wantDowns++
				}
			}
			assert.Equal(t, wantDowns, downs, "onDown once per degradation (the mirror is emptied then)")
		})
	}
}

// TestHealthRetriesOncePerInterval: while degraded, one caller per
// interval tries cooldownd.
func TestHealthRetriesOncePerInterval(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.degradeAfter = 1
	h := newHealth(cfg, 1, slog.New(slog.DiscardHandler), func() {}, func() {})
	t0 := time.Unix(1_000_000, 0)
	assert.True(t, h.useService(t0))
	h.failure(t0, "admit", []int{0}, errors.New("down"))
	assert.False(t, h.useService(t0.Add(500*time.Millisecond)))
	assert.True(t, h.useService(t0.Add(time.Second)), "the first caller after the interval tries")
	assert.False(t, h.useService(t0.Add(time.Second)), "the others do not")
}
