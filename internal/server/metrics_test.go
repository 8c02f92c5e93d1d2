package server_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// scrape reads /metrics into name{labels} → value, one label set per
// series, labels in Prometheus's sorted order.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	require.NoError(t, err)
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			key := name + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			key += "}"
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestMetricsFromAnswers checks the counters the interceptor derives from
// RPC answers and the connections-by-state gauge, with auth off (tenant
// "default").
func TestMetricsFromAnswers(t *testing.T) {
	t.Parallel()
	ts := servertest.Start(t)
	mini, srv, hs := ts.Mini, ts.Server(), ts.HTTP()
	api := cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL)
	adm := cooldownv1connect.NewAdminServiceClient(hs.Client(), hs.URL)
	ctx := t.Context()

	before := scrape(t, hs.URL)
	assert.Empty(t, keysWith(before, "cooldownd_connections{"), "no tenant seen yet")

	a, b, c := metricsID(t), metricsID(t), metricsID(t)
	rep := func(id []byte, o cooldownv1.Outcome, retry time.Duration) {
		req := &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id}, Outcome: o}
		if retry > 0 {
			req.RetryAfter = durationpb.New(retry)
		}
		_, err := api.Report(ctx, connect.NewRequest(req))
		require.NoError(t, err)
	}
	rep(a, cooldownv1.Outcome_OUTCOME_RATE_LIMITED, time.Hour)
	rep(b, cooldownv1.Outcome_OUTCOME_QUOTA_EXHAUSTED, 0)
	rep(c, cooldownv1.Outcome_OUTCOME_SUCCESS, 0)
	rep(c, cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 10*time.Millisecond)
	time.Sleep(20 * time.Millisecond) // miniredis TIME is the wall clock here
	adm1, err := api.Admit(ctx, connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: c}}}))
	require.NoError(t, err)
	require.Equal(t, cooldownv1.Decision_DECISION_ALLOW_PROBE, adm1.Msg.GetDecision())
	// The probe's holder dies: its 30 s lease lapses, and the next caller
	// takes the slot over.
	mini.FastForward(31 * time.Second)
	mini.SetTime(time.Now().Add(31 * time.Second))
	adm2, err := api.Admit(ctx, connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: c}}}))
	require.NoError(t, err)
	require.Equal(t, cooldownv1.Decision_DECISION_ALLOW_PROBE, adm2.Msg.GetDecision())
	_, err = adm.ResetConnection(ctx, connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: b, Reason: "x"}))
	require.NoError(t, err)
	_, err = adm.ForceConnection(ctx, connect.NewRequest(&cooldownv1.ForceConnectionRequest{Id: b, Override: cooldownv1.Override_OVERRIDE_FORCED_OPEN}))
	require.NoError(t, err)

	m := scrape(t, hs.URL)
	assert.Equal(t, 2.0, m["cooldownd_transitions_total{cause=rate_limit,from=closed,to=open}"])
	assert.Equal(t, 1.0, m["cooldownd_transitions_total{cause=quota,from=closed,to=open}"])
	assert.Equal(t, 1.0, m["cooldownd_transitions_total{cause=open_expired,from=open,to=half_open}"], "Admit's own transition")
	assert.Equal(t, 1.0, m["cooldownd_transitions_total{cause=reset,from=open,to=closed}"])
	assert.Equal(t, 1.0, m["cooldownd_transitions_total{cause=forced,from=closed,to=open}"])
	assert.Equal(t, 2.0, m["cooldownd_probes_granted_total{}"])
	assert.Equal(t, 1.0, m["cooldownd_probes_expired_total{}"], "the first probe's lease lapsed")
	assert.Equal(t, 1.0, m["cooldownd_overrides_total{action=reset}"])
	assert.Equal(t, 1.0, m["cooldownd_overrides_total{action=force_open}"])
	assert.Equal(t, 2.0, m["cooldownd_connections{state=open,tenant=default}"], "a (rate limit) and b (forced)")
	assert.Equal(t, 1.0, m["cooldownd_connections{state=half_open,tenant=default}"])
	assert.Equal(t, 0.0, m["cooldownd_connections{state=closed,tenant=default}"])
	assert.Equal(t, 1.0, m["cooldownd_connections_open{cause=rate_limit,tenant=default}"])
	assert.Equal(t, 1.0, m["cooldownd_connections_open{cause=forced,tenant=default}"])
	assert.Equal(t, 0.0, m["cooldownd_connections_truncated{tenant=default}"])
	assert.Equal(t, 0.0, m["cooldownd_watch_streams{}"])
	assert.Positive(t, m["cooldownd_rpc_duration_seconds{code=ok,procedure=/cooldown.v1.CooldownService/Report}"])

	// Redis latency, as a hook reports it; unknown ops do not grow labels.
	srv.ObserveRedis("EVALSHA", time.Millisecond)
	srv.ObserveRedis("whatever-"+hex.EncodeToString(a), time.Millisecond)
	m = scrape(t, hs.URL)
	assert.Equal(t, 1.0, m["cooldownd_redis_duration_seconds{op=evalsha}"])
	assert.Equal(t, 1.0, m["cooldownd_redis_duration_seconds{op=other}"])

	// The sample Grafana dashboard only queries metrics that exist.
	families := map[string]bool{}
	for k := range m {
		families[k[:strings.IndexByte(k, '{')]] = true
	}
	js, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana", "cooldownd.json"))
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(js, &dash))
	queried := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range regexp.MustCompile(`\b(cooldownd_[a-z_]+|go_build_info)\b`).FindAllString(tg.Expr, -1) {
				queried++
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
				assert.True(t, families[base], "the Grafana dashboard queries %s, which /metrics does not serve", name)
			}
		}
	}
	assert.Greater(t, queried, 15)

	// No series carries a connection id.
	for k := range m {
		for _, id := range [][]byte{a, b, c} {
			assert.NotContains(t, k, hex.EncodeToString(id)[:8])
		}
	}
}

func metricsID(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

func keysWith(m map[string]float64, prefix string) []string {
	var out []string
	for k := range m {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			out = append(out, k)
		}
	}
	return out
}
