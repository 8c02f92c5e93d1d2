package server

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onWorker reports whether the calling goroutine is one of warmStacks'.
func onWorker() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*warmStacks).work")
}

// TestWarmStacks: the HTTP/2 requests of the hot unary procedures are
// served on the long-lived workers (once one is started: the first is
// served where it is and starts it), everything else where it is; a
// handler's panic is raised again on the request's goroutine, where
// net/http expects it, and the worker goes on; Close ends the workers.
func TestWarmStacks(t *testing.T) {
	stop := make(chan struct{})
	ws := newWarmStacks(stop)
	var mu sync.Mutex
	var served []bool
	h := ws.warm(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Panic") != "" {
			panic(http.ErrAbortHandler)
		}
		mu.Lock()
		served = append(served, onWorker())
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	serve := func(proto int, path string, hdr ...string) (code int, panicked any) {
		r := httptest.NewRequest(http.MethodPost, path, nil)
		r.ProtoMajor = proto
		if len(hdr) > 0 {
			r.Header.Set("Panic", hdr[0])
		}
		w := httptest.NewRecorder()
		defer func() { panicked = recover() }()
		h.ServeHTTP(w, r)
		return w.Code, nil
	}
	last := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return served[len(served)-1]
	}

	code, _ := serve(2, "/cooldown.v1.CooldownService/Admit")
	require.Equal(t, http.StatusNoContent, code)
	assert.False(t, last(), "no worker yet: served where it is, and one is started")
	for i := 0; !onWorkerServed(t, serve, last, 2, "/cooldown.v1.CooldownService/Admit"); i++ {
		require.Less(t, i, 1000, "the started worker never took a request")
	}
	assert.True(t, onWorkerServed(t, serve, last, 2, "/cooldown.v1.CooldownService/Report"), "Report too")
	assert.False(t, onWorkerServed(t, serve, last, 1, "/cooldown.v1.CooldownService/Admit"), "HTTP/1.1 keeps its connection's goroutine")
	assert.False(t, onWorkerServed(t, serve, last, 2, "/cooldown.v1.CooldownService/WatchConnections"), "a stream would hold a worker for its life")
	assert.False(t, onWorkerServed(t, serve, last, 2, "/metrics"))

	_, p := serve(2, "/cooldown.v1.CooldownService/Admit", "yes")
	assert.Equal(t, http.ErrAbortHandler, p, "the panic reaches the request's goroutine")
	// The worker takes requests again once it is back in the pool; a
	// request before that is served inline (one try flaked under -race -count=20).
	for i := 0; !onWorkerServed(t, serve, last, 2, "/cooldown.v1.CooldownService/Admit"); i++ {
		require.Less(t, i, 1000, "the worker survived it")
	}

	close(stop)
	for i := 0; onWorkerServed(t, serve, last, 2, "/cooldown.v1.CooldownService/Admit"); i++ {
		require.Less(t, i, 1000, "a worker outlived Close")
	}
}

func onWorkerServed(t *testing.T, serve func(int, string, ...string) (int, any), last func() bool, proto int, path string) bool {
	t.Helper()
	code, p := serve(proto, path)
	require.Nil(t, p)
	require.Equal(t, http.StatusNoContent, code)
	return last()
}
