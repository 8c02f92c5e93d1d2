package main

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// blackhole is a TCP proxy on loopback in front of a real Redis. Once
// swallow is on it keeps every connection open and reads what it is sent,
// but never forwards or answers anything: a Redis behind a dead link or a
// stuck network path, the worst case for deadlines.
type blackhole struct {
	ln      net.Listener
	target  string
	swallow atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func startBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &blackhole{ln: ln, target: target}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

func (b *blackhole) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", b.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		b.mu.Lock()
		b.conns = append(b.conns, c, up)
		b.mu.Unlock()
		b.wg.Add(2)
		go b.pipe(up, c)
		go b.pipe(c, up)
	}
}

// pipe copies src to dst until either closes, dropping everything while
// the proxy swallows.
func (b *blackhole) pipe(dst, src net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.swallow.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (b *blackhole) close() {
	_ = b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// TestDeadlinesHoldWhenRedisIsBlackholed: with Redis answering nothing, an
// Admit sent with a 250 ms deadline answers within it, one without a
// deadline answers unavailable after the store timeout, and readiness
// answers within its own bound. (Before: 5.0 s and 5-6 s.)
func TestDeadlinesHoldWhenRedisIsBlackholed(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	bh := startBlackhole(t, srv.Addr)
	in := start(t, "--addr", "127.0.0.1:0", "--redis-url", "redis://"+bh.addr(), "--readiness-timeout", "300ms")
	c := cooldownv1connect.NewCooldownServiceClient(h2c(), in.url())
	req := func() *connect.Request[cooldownv1.AdmitRequest] {
		return connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: newID(7)}}})
	}
	// Redis answers through the proxy. (A loaded test machine can exceed
	// the 200 ms store timeout once, on the first call that loads the
	// script: retry a few times.)
	var err error
	for range 20 {
		if _, err = c.Admit(t.Context(), req()); err == nil {
			break
		}
	}
	require.NoError(t, err, "Redis answers through the proxy")

	bh.swallow.Store(true)

	// bound is far above what each call should take (250 ms, 200 ms,
	// 300 ms) and far below what it took before (5 s and more).
	const bound = 2 * time.Second
	// The deadline is sent as Connect-Timeout-Ms with no deadline on the
	// test's side: what is measured is when the server answers.
	body := `{"candidates":[{"id":"` + base64.StdEncoding.EncodeToString(newID(7)) + `"}]}`
	hc := &http.Client{Timeout: 10 * time.Second}
	for i := range 3 { // pooled connections, then new dials: both are bounded
		hreq, err := http.NewRequestWithContext(t.Context(), http.MethodPost, in.url()+"/cooldown.v1.CooldownService/Admit", strings.NewReader(body))
		require.NoError(t, err)
		hreq.Header.Set("Content-Type", "application/json")
		hreq.Header.Set("Connect-Timeout-Ms", "250")
		began := time.Now()
		res, err := hc.Do(hreq)
		took := time.Since(began)
		require.NoError(t, err)
		answer, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		assert.NotEqual(t, http.StatusOK, res.StatusCode, "%s", answer)
		assert.Less(t, took, bound, "Admit %d with Connect-Timeout-Ms 250 took %s", i, took)
		t.Logf("Admit with Connect-Timeout-Ms 250, Redis blackholed: answered in %s: %s", took, answer)
	}

	began := time.Now()
	_, err = c.Admit(t.Context(), req())
	took := time.Since(began)
	require.Error(t, err)
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "the store timed out: clients may degrade")
	assert.Contains(t, err.Error(), "timed out")
	assert.Less(t, took, bound, "Admit without a deadline is bounded by --redis-timeout")
	t.Logf("Admit without a deadline, Redis blackholed: %s", took)

	began = time.Now()
	res, err := hc.Get(in.url() + "/healthz")
	took = time.Since(began)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Less(t, took, bound, "/healthz answers within --readiness-timeout")
	t.Logf("/healthz with --readiness-timeout 300ms, Redis blackholed: %s", took)

	// And once the path answers again, so does cooldownd.
	bh.swallow.Store(false)
	var lastErr error
	for range 100 {
		if _, lastErr = c.Admit(t.Context(), req()); lastErr == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, lastErr, "recovers when Redis answers again")
	assert.False(t, errors.Is(lastErr, context.DeadlineExceeded))
}
