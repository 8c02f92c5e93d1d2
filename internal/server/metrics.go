package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/store"
)

// Metrics are the server's Prometheus metrics, on a registry of its own
// (so several servers in one test process do not collide). No label
// carries a connection id: cardinality stays bounded.
type Metrics struct {
	reg     *prometheus.Registry
	admits  *prometheus.CounterVec
	reports *prometheus.CounterVec
	rpc     *prometheus.HistogramVec
}

func newMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		admits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cooldownd_admits_total", Help: "Admit decisions per examined candidate, by decision and deny reason.",
		}, []string{"decision", "reason"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cooldownd_reports_total", Help: "Reports by outcome and whether they carried the current revision or a live lease.",
		}, []string{"outcome", "accepted"}),
		rpc: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cooldownd_rpc_duration_seconds", Help: "RPC latency by procedure and Connect code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"procedure", "code"}),
	}
	m.reg.MustRegister(m.admits, m.reports, m.rpc,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewBuildInfoCollector())
	return m
}

var decisionNames = map[breaker.Decision]string{breaker.Allow: "allow", breaker.AllowProbe: "allow_probe", breaker.Deny: "deny"}

var reasonNames = map[breaker.DenyReason]string{
	breaker.ReasonNone: "", breaker.ReasonCooldown: "cooldown", breaker.ReasonOpen: "open", breaker.ReasonProbeInFlight: "probe_in_flight",
	breaker.ReasonQuota: "quota", breaker.ReasonAuth: "auth", breaker.ReasonForcedOpen: "forced_open", breaker.ReasonOverloaded: "overloaded",
}

var outcomeNames = map[breaker.Outcome]string{
	breaker.OutcomeSuccess: "success", breaker.OutcomeTransientFailure: "transient_failure", breaker.OutcomeRateLimited: "rate_limited",
	breaker.OutcomeOverloaded: "overloaded", breaker.OutcomeQuotaExhausted: "quota_exhausted", breaker.OutcomeAuthFailure: "auth_failure",
	breaker.OutcomeClientError: "client_error", breaker.OutcomeCanceled: "canceled",
}

func (m *Metrics) admit(d store.Decision) {
	m.admits.WithLabelValues(decisionNames[d.Decision], reasonNames[d.Reason]).Inc()
}

func (m *Metrics) report(o breaker.Outcome, accepted bool) {
	a := "false"
	if accepted {
		a = "true"
	}
	m.reports.WithLabelValues(outcomeNames[o], a).Inc()
}

func (m *Metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// interceptor times every unary RPC.
func (m *Metrics) interceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			res, err := next(ctx, req)
			code := "ok"
			var ce *connect.Error
			if errors.As(err, &ce) {
				code = ce.Code().String()
			} else if err != nil {
				code = connect.CodeUnknown.String()
			}
			m.rpc.WithLabelValues(req.Spec().Procedure, code).Observe(time.Since(start).Seconds())
			return res, err
		}
	})
}
