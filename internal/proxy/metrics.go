package proxy

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxModels bounds the model label's values: an app could send any model
// name, and each would be a series of its own. Models past the bound are
// counted as "other".
const maxModels = 64

type metrics struct {
	requests *prometheus.CounterVec

	mu     sync.Mutex
	models map[string]bool
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cooldown_proxy_requests_total",
			Help: "Requests the proxy answered, by route prefix, requested model (\"\" unknown, \"other\" past 64 models) and decision: forwarded, fallback (a fallback answered), denied (cooldownd's denial, in the upstream's error shape), error (no answer from the upstream), rejected (refused by the proxy), canceled.",
		}, []string{"route", "model", "decision"}),
		models: map[string]bool{},
	}
	if reg != nil {
		if err := reg.Register(m.requests); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) count(route, model, decision string) {
	m.mu.Lock()
	if model != "" && !m.models[model] {
		if len(m.models) < maxModels {
			m.models[model] = true
		} else {
			model = "other"
		}
	}
	m.mu.Unlock()
	m.requests.WithLabelValues(route, model, decision).Inc()
}
