package server

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// warmStacks runs the hot unary RPCs of HTTP/2 requests on long-lived
// goroutines. net/http runs each HTTP/2 stream's handler on a goroutine of
// its own, born with a small stack; an Admit's call chain (connect, the
// interceptors, the store, go-redis and its hooks) outgrows it, and the
// runtime copies the stack, frame by frame, once or twice per request
// (runtime.copystack: 11 % of cooldownd's CPU per Admit over h2c in
// BenchmarkRPCPath's profile). An HTTP/1.1 connection's goroutine serves
// its requests one after the other and keeps its grown stack; these
// workers do the same for HTTP/2. When every worker is busy the request
// runs where it is, as before, and a worker is started (up to
// warmWorkers): the workers bound nothing. They end with the server
// (Server.Close).
type warmStacks struct {
	jobs    chan *warmJob
	pool    sync.Pool // *warmJob
	started atomic.Int32
	stop    <-chan struct{}
}

// warmWorkers is how many workers wait: enough for the calls in flight of
// a busy replica (a Redis round trip each), each a goroutine whose stack
// the runtime may halve at a GC while it waits.
const warmWorkers = 64

type warmJob struct {
	h    http.Handler
	w    http.ResponseWriter
	r    *http.Request
	done chan any // the handler's panic, or nil
}

func newWarmStacks(stop <-chan struct{}) *warmStacks {
	ws := &warmStacks{jobs: make(chan *warmJob), stop: stop}
	ws.pool.New = func() any { return &warmJob{done: make(chan any, 1)} }
	return ws
}

func (ws *warmStacks) work() {
	for {
		select {
		case j := <-ws.jobs:
			j.done <- serveRecovered(j.h, j.w, j.r)
		case <-ws.stop:
			return
		}
	}
}

// serveRecovered serves r and returns what the handler panicked with, so
// that the panic is raised again on the request's own goroutine, where
// net/http expects it (http.ErrAbortHandler among them), and never ends a
// worker or the process.
func serveRecovered(h http.Handler, w http.ResponseWriter, r *http.Request) (p any) {
	defer func() { p = recover() }()
	h.ServeHTTP(w, r)
	return nil
}

// warm runs next on a worker for the HTTP/2 requests of the hot unary
// procedures, and inline for everything else (HTTP/1.1 keeps its own
// goroutine's stack; a stream would hold a worker for its whole life).
func (ws *warmStacks) warm(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || !hotUnary(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		j := ws.pool.Get().(*warmJob)
		j.h, j.w, j.r = next, w, r
		select {
		case ws.jobs <- j:
		default:
			j.h, j.w, j.r = nil, nil, nil
			ws.pool.Put(j)
			select {
			case <-ws.stop: // the server is closing: no new worker
			default:
				if ws.started.Add(1) <= warmWorkers {
					go ws.work() // for the next one
				} else {
					ws.started.Add(-1)
				}
			}
			next.ServeHTTP(w, r) // every worker is busy
			return
		}
		p := <-j.done
		j.h, j.w, j.r = nil, nil, nil
		ws.pool.Put(j)
		if p != nil {
			panic(p)
		}
	})
}

// hotUnary reports whether path is one of the unary calls every guarded
// provider call makes.
func hotUnary(path string) bool {
	switch path {
	case "/cooldown.v1.CooldownService/Admit", "/cooldown.v1.CooldownService/Report",
		"/cooldown.v1.CooldownService/ExtendLease":
		return true
	}
	return false
}
