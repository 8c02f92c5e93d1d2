package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// BenchmarkProxy measures, in one run on one fake upstream, a request
// sent directly, through a plain httputil.ReverseProxy and through the
// proxy with the client's mirror on. It reports the latency's p50 and p99
// and the process's CPU per request (load generator, upstream, proxy and
// the in-process cooldownd together: compare the rows, the difference is
// what each hop adds) and, for the proxy, cooldownd's calls per request.
//
//	go test -run '^$' -bench BenchmarkProxy -benchtime 3000x ./internal/proxy
func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"gpt-4o","choices":[]}`)
	}))
	b.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)

	plain := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(upURL)
		pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, "/openai")
	}})
	b.Cleanup(plain.Close)

	cd := servertest.Start(b)
	cl, err := client.New(cd.URL, client.WithMirror(0), client.WithAdmitTimeout(10*time.Second), client.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(b, err)
	b.Cleanup(func() { _ = cl.Close() })
	r, err := ParseRoute("/openai=" + up.URL)
	require.NoError(b, err)
	px, err := New(Config{Client: cl, Routes: []Route{r}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	guarded := httptest.NewServer(px)
	b.Cleanup(guarded.Close)

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	send := func(b *testing.B, base string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/openai/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer sk-bench")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	for _, tc := range []struct{ name, base string }{
		{"direct", up.URL + "/openai"}, // the upstream ignores the prefix
		{"reverseproxy", plain.URL},
		{"cooldown-proxy/mirror", guarded.URL},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range 200 { // warm: connections, and the mirror's watch
				send(b, tc.base)
			}
			lat := make([]time.Duration, 0, 4096)
			calls := cd.Calls()
			cpu := cpuTime()
			for b.Loop() {
				t0 := time.Now()
				send(b, tc.base)
				lat = append(lat, time.Since(t0))
			}
			n := float64(len(lat))
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/n, "cpu-µs/op")
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			if tc.base == guarded.URL {
				b.ReportMetric(float64(cd.Calls()-calls)/n, "cooldownd-calls/op")
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestMirroredHealthyPathSkipsCooldownd: with the mirror on, a healthy
// connection's requests go through the proxy without a round trip to
// cooldownd each (successes are reported in batches).
func TestMirroredHealthyPathSkipsCooldownd(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	cd := servertest.Start(t)
	cl, err := client.New(cd.URL, client.WithMirror(time.Hour), client.WithAdmitTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	r, err := ParseRoute("/openai=" + up.srv.URL)
	require.NoError(t, err)
	px, err := New(Config{Client: cl, Routes: []Route{r}, Transport: trusting(up), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(px)
	t.Cleanup(srv.Close)
	send := func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/openai/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o"}`))
		req.Header.Set("Authorization", "Bearer sk-mirror")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	// Until the watch has the connection, calls go to cooldownd (bounded).
	for deadline := time.Now().Add(time.Minute); cl.Stats().Mirror.Mirrored == 0; {
		require.True(t, time.Now().Before(deadline), "the mirror never took the connection")
		send()
	}
	calls := cd.Calls()
	admits := cl.Stats().Mirror.Admits
	for range 50 {
		send()
	}
	require.Equal(t, admits+50, cl.Stats().Mirror.Admits, "every call admitted from the mirror")
	require.Equal(t, calls, cd.Calls(), "no call reached cooldownd")
}
