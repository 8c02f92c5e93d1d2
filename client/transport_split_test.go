package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// protoRecorder serves cooldownd's contract and records the HTTP version
// of each call by procedure; Admit answers ALLOW, WatchConnections ends
// at once with no message.
type protoRecorder struct {
	cooldownv1connect.UnimplementedCooldownServiceHandler
	mu     sync.Mutex
	protos map[string][]string
}

func (p *protoRecorder) note(proc, proto string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.protos[proc] = append(p.protos[proc], proto)
}

func (p *protoRecorder) seen() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]string{}
	for k, v := range p.protos {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// startProtoServer serves a protoRecorder over HTTP/1.1, and over h2c too
// when h2c is set (as cmd/cooldownd does).
func startProtoServer(t *testing.T, h2c bool) (*protoRecorder, string) {
	t.Helper()
	rec := &protoRecorder{protos: map[string][]string{}}
	path, h := cooldownv1connect.NewCooldownServiceHandler(rec)
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.note(r.URL.Path, r.Proto)
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(h2c)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func (*protoRecorder) Admit(context.Context, *connect.Request[cooldownv1.AdmitRequest]) (*connect.Response[cooldownv1.AdmitResponse], error) {
	return connect.NewResponse(&cooldownv1.AdmitResponse{Decision: cooldownv1.Decision_DECISION_ALLOW}), nil
}

func (*protoRecorder) WatchConnections(context.Context, *connect.Request[cooldownv1.WatchConnectionsRequest], *connect.ServerStream[cooldownv1.WatchConnectionsResponse]) error {
	return nil
}

// TestDefaultTransportProtocols: over http://, the default transport sends
// unary calls over HTTP/1.1 (they cost cooldownd a third less CPU than
// over h2c, docs/decisions/0052-unary-calls-over-http1.md) and streams
// over h2c, or over HTTP/1.1 from a server that speaks only that.
func TestDefaultTransportProtocols(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		h2c        bool
		wantUnary  string
		wantStream string
	}{
		{name: "h2c and HTTP/1.1 server (cooldownd)", h2c: true, wantUnary: "HTTP/1.1", wantStream: "HTTP/2.0"},
		{name: "HTTP/1.1-only server", h2c: false, wantUnary: "HTTP/1.1", wantStream: "HTTP/1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec, url := startProtoServer(t, tt.h2c)
			hc := newHTTPClient("http")
			t.Cleanup(hc.CloseIdleConnections)
			rpc := cooldownv1connect.NewCooldownServiceClient(hc, url)
			for range 3 {
				_, err := rpc.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{}))
				require.NoError(t, err)
				st, err := rpc.WatchConnections(t.Context(), connect.NewRequest(&cooldownv1.WatchConnectionsRequest{}))
				require.NoError(t, err)
				for st.Receive() {
				}
				require.NoError(t, st.Err())
				require.NoError(t, st.Close())
			}
			got := rec.seen()
			assert.Equal(t, []string{tt.wantUnary, tt.wantUnary, tt.wantUnary}, got[cooldownv1connect.CooldownServiceAdmitProcedure])
			assert.Equal(t, []string{tt.wantStream, tt.wantStream, tt.wantStream}, got[cooldownv1connect.CooldownServiceWatchConnectionsProcedure])
		})
	}
}

// TestIsStreaming: which requests the default transport sends as streams.
func TestIsStreaming(t *testing.T) {
	t.Parallel()
	tests := []struct {
		contentType string
		want        bool
	}{
		{"application/proto", false},
		{"application/json", false},
		{"", false},
		{"application/connect+proto", true},
		{"application/connect+json", true},
		{"application/grpc", true},
		{"application/grpc+proto", true},
		{"application/grpc-web+proto", true},
	}
	for _, tt := range tests {
		t.Run(tt.contentType, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "http://cooldownd/x", nil)
			if tt.contentType != "" {
				r.Header.Set("Content-Type", tt.contentType)
			}
			assert.Equal(t, tt.want, isStreaming(r))
		})
	}
}

// TestUnaryPoolKeepsConnections: 64 calls in flight at once (c=64) take 64
// HTTP/1.1 connections, and the next 64 reuse them: the pool keeps every
// one idle, none is dialled again; and the pool opens no more than
// unaryConnsPerHost.
func TestUnaryPoolKeepsConnections(t *testing.T) {
	t.Parallel()
	const conc = 64
	var dialled atomic.Int32
	var inFlight atomic.Int32
	release := make(chan struct{})
	_, h := cooldownv1connect.NewCooldownServiceHandler(&protoRecorder{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if inFlight.Add(1) == conc {
			close(release)
		}
		<-release // every call of a wave is in flight at once
		h.ServeHTTP(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	hc := newHTTPClient("http")
	t.Cleanup(hc.CloseIdleConnections)
	rpc := cooldownv1connect.NewCooldownServiceClient(hc, srv.URL)
	wave := func() {
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				_, err := rpc.Admit(context.Background(), connect.NewRequest(&cooldownv1.AdmitRequest{}))
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	}
	wave()
	assert.EqualValues(t, conc, dialled.Load(), "one connection per call in flight")
	wave() // release is closed: the calls need not meet
	assert.EqualValues(t, conc, dialled.Load(), "the second wave reuses the first one's connections")

	unary := hc.Transport.(*splitTransport).unary
	assert.Equal(t, unaryConnsPerHost, unary.MaxConnsPerHost)
	assert.Equal(t, unaryConnsPerHost, unary.MaxIdleConnsPerHost)
}
