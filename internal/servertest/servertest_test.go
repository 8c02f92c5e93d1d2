package servertest_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/servertest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// t0 is the Redis clock of the tests that read a breaker's open period.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// h2c is a client that speaks unencrypted HTTP/2 only (prior knowledge).
func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// http1 is a client that speaks HTTP/1.1 only.
func http1() *http.Client {
	var p http.Protocols
	p.SetHTTP1(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func rateLimit(t *testing.T, c cooldownv1connect.CooldownServiceClient, id []byte) *cooldownv1.ReportResponse {
	t.Helper()
	res, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: &cooldownv1.Connection{Id: id}, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED,
	}))
	require.NoError(t, err)
	return res.Msg
}

func TestProtocols(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		protocol servertest.Protocol
		client   func(*servertest.Server) *http.Client
		scheme   string
		opts     []connect.ClientOption
		wantErr  bool
	}{
		{"h2c serves h2c", servertest.H2C, func(*servertest.Server) *http.Client { return h2c() }, "http://", []connect.ClientOption{connect.WithGRPC()}, false},
		{"h2c serves HTTP/1.1", servertest.H2C, func(*servertest.Server) *http.Client { return http1() }, "http://", nil, false},
		{"TLS serves gRPC", servertest.TLS, (*servertest.Server).Client, "https://", []connect.ClientOption{connect.WithGRPC()}, false},
		{"HTTP/1.1 serves HTTP/1.1", servertest.HTTP1, func(*servertest.Server) *http.Client { return http1() }, "http://", nil, false},
		{"HTTP/1.1 refuses h2c", servertest.HTTP1, func(*servertest.Server) *http.Client { return h2c() }, "http://", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := servertest.Start(t, servertest.WithProtocol(tt.protocol))
			require.True(t, strings.HasPrefix(s.URL, tt.scheme), s.URL)
			c := cooldownv1connect.NewCooldownServiceClient(tt.client(s), s.URL, tt.opts...)
			_, err := c.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{
				Candidates: []*cooldownv1.Connection{{Id: make([]byte, 32)}},
			}))
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			assert.NoError(t, err)
		})
	}
}

// TestPolicy: the store runs the policy given (a rate limit without
// Retry-After opens for the policy's RateLimitCooldown).
func TestPolicy(t *testing.T) {
	t.Parallel()
	long := servertest.FastPolicy()
	long.RateLimitCooldown = time.Hour
	for _, tt := range []struct {
		name   string
		policy breaker.Policy
	}{{"fast", servertest.FastPolicy()}, {"an hour", long}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, tt.policy.Validate())
			s := servertest.Start(t, servertest.WithPolicy(tt.policy))
			s.Mini.SetTime(t0) // Redis TIME stands still: the breaker stays open
			c := cooldownv1connect.NewCooldownServiceClient(http1(), s.URL)
			id := make([]byte, 32)
			rep := rateLimit(t, c, id)
			assert.Equal(t, cooldownv1.State_STATE_OPEN, rep.GetState())
			got, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
			require.NoError(t, err)
			open := got.Msg.GetConnection().GetOpenUntil().AsTime().Sub(rep.GetServerTime().AsTime())
			assert.Equal(t, tt.policy.RateLimitCooldown, open, "open from the report for the policy's cooldown")
		})
	}
}

// TestTokens: the test table authenticates each token in its tenant and
// role, and refuses a caller without one.
func TestTokens(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.WithAuth(servertest.Tokens(t)))
	for _, tt := range []struct {
		name  string
		token string
		code  connect.Code // 0: allowed
	}{
		{"no token", "", connect.CodeUnauthenticated},
		{"wrong token", "wrong", connect.CodeUnauthenticated},
		{"client", servertest.ClientToken, 0},
		{"other tenant's client", servertest.OtherToken, 0},
		{"admin", servertest.AdminToken, 0},
		{"viewer", servertest.ViewerToken, connect.CodePermissionDenied},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hc := http1()
			if tt.token != "" {
				hc.Transport = servertest.Bearer(hc.Transport, tt.token)
			}
			c := cooldownv1connect.NewCooldownServiceClient(hc, s.URL)
			_, err := c.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{
				Candidates: []*cooldownv1.Connection{{Id: make([]byte, 32)}},
			}))
			if tt.code == 0 {
				assert.NoError(t, err)
				return
			}
			assert.Equal(t, tt.code, connect.CodeOf(err), "error: %v", err)
		})
	}
}

// TestRestart: a stopped server refuses connections; restarted, it answers
// on the same address from the same store.
func TestRestart(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.WithPolicy(servertest.FastPolicy()))
	s.Mini.SetTime(t0) // Redis TIME stands still: the breaker stays open
	c := cooldownv1connect.NewCooldownServiceClient(http1(), s.URL)
	id := make([]byte, 32)
	id[0] = 7
	rateLimit(t, c, id)
	addr := s.Addr

	s.Stop()
	assert.Nil(t, s.Server())
	_, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
	require.Error(t, err, "nobody listens")
	s.Stop() // twice is harmless

	require.NoError(t, s.Restart(t.Context()))
	assert.Equal(t, addr, s.Addr)
	got, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.State_STATE_OPEN, got.Msg.GetConnection().GetState(), "the store outlived the restart")

	require.NoError(t, s.Restart(t.Context()), "a running server restarts too")
	c = cooldownv1connect.NewCooldownServiceClient(http1(), s.URL) // the old connection was cut
	_, err = c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
	assert.NoError(t, err)
}

// TestReplica: WithStore serves another server's store.
func TestReplica(t *testing.T) {
	t.Parallel()
	a := servertest.Start(t, servertest.WithPolicy(servertest.FastPolicy()))
	a.Mini.SetTime(t0) // Redis TIME stands still: the breaker stays open
	b := servertest.Start(t, servertest.WithStore(a.Store))
	require.NotEqual(t, a.Addr, b.Addr)
	id := make([]byte, 32)
	id[0] = 9
	rateLimit(t, cooldownv1connect.NewCooldownServiceClient(http1(), a.URL), id)
	got, err := cooldownv1connect.NewCooldownServiceClient(http1(), b.URL).
		GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.State_STATE_OPEN, got.Msg.GetConnection().GetState())
}

// TestRecordingAndIntercept: the wire holds each request's headers and
// body whole; an interceptor answers in the server's place until cleared;
// Calls counts both.
func TestRecordingAndIntercept(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.WithRecording())
	hc := http1()
	hc.Transport = servertest.Bearer(hc.Transport, "recorded-token")
	c := cooldownv1connect.NewCooldownServiceClient(hc, s.URL, connect.WithProtoJSON())
	admit := func() error {
		_, err := c.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{
			Candidates: []*cooldownv1.Connection{{Id: make([]byte, 32), Label: "label-on-the-wire"}},
		}))
		return err
	}
	require.NoError(t, admit())
	wire := string(s.Wire())
	assert.Contains(t, wire, "POST /cooldown.v1.CooldownService/Admit HTTP/1.1")
	assert.Contains(t, wire, "Authorization: Bearer recorded-token")
	assert.Contains(t, wire, `"label":"label-on-the-wire"`)

	s.SetIntercept(func(w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(admit()))
	s.SetIntercept(nil)
	require.NoError(t, admit())
	assert.Equal(t, int64(3), s.Calls())
}

// TestStoreOptions: the store's options reach the store.
func TestStoreOptions(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.WithStoreOptions(func(o *store.Options) { o.MaxConnsPerTenant = 1 }))
	c := cooldownv1connect.NewCooldownServiceClient(http1(), s.URL)
	a, b := make([]byte, 32), make([]byte, 32)
	b[0] = 1
	rateLimit(t, c, a)
	_, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: &cooldownv1.Connection{Id: b}, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED,
	}))
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "over the cap: %v", err)
}

// TestRun: a server outside a test closes with its Redis.
func TestRun(t *testing.T) {
	t.Parallel()
	s, err := servertest.Run(servertest.WithPolicy(breaker.DefaultPolicy()))
	require.NoError(t, err)
	rateLimit(t, cooldownv1connect.NewCooldownServiceClient(http1(), s.URL), make([]byte, 32))
	s.Close()
	assert.Nil(t, s.Server())
	_, err = http1().Get(s.URL + "/healthz")
	assert.Error(t, err, "closed")
}

func TestSleep(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := servertest.Sleep(ctx, time.Hour)
	assert.True(t, errors.Is(err, context.Canceled), "a done context ends the sleep: %v", err)
	assert.NoError(t, servertest.Sleep(t.Context(), time.Millisecond))
}

// TestSilent: the address accepts a connection and answers nothing.
func TestSilent(t *testing.T) {
	t.Parallel()
	c, err := net.Dial("tcp", servertest.Silent(t))
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	_, err = c.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "no answer: %v", err)
}
