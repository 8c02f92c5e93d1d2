package server_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// t0 is the miniredis clock at the start of every test: the Lua scripts
// read Redis TIME, so the whole machine runs on it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fastPolicy runs the machine in milliseconds, without jitter so that
// durations are exact.
func fastPolicy() breaker.Policy { return servertest.FastPolicy() }

// protocols are the three wire protocols every RPC test runs over.
var protocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}},
}

// env is one cooldownd server over HTTP/2 with TLS on a store over its own
// miniredis, with a clock the test moves.
type env struct {
	t     *testing.T
	mini  *miniredis.Miniredis
	store *store.Store
	srv   *server.Server
	http  *httptest.Server

	mu  sync.Mutex
	now time.Time
}

type envOptions struct {
	auth      server.Authenticator
	heartbeat time.Duration
	idleTTL   time.Duration
	server    func(*server.Options)
}

type envOption func(*envOptions)

func withAuth(a server.Authenticator) envOption { return func(o *envOptions) { o.auth = a } }

func withIdleTTL(d time.Duration) envOption { return func(o *envOptions) { o.idleTTL = d } }

func withHeartbeat(d time.Duration) envOption { return func(o *envOptions) { o.heartbeat = d } }

// withServer edits the server's options (after the defaults are set).
func withServer(f func(*server.Options)) envOption { return func(o *envOptions) { o.server = f } }

// newEnv starts a server bound to the test over HTTP/2 with TLS. A
// handler panic (which net/http would recover and log) fails the test.
func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	var o envOptions
	for _, f := range opts {
		f(&o)
	}
	ts := servertest.Start(t, servertest.WithPolicy(fastPolicy()), servertest.WithAuth(o.auth), servertest.WithProtocol(servertest.TLS),
		// One dial attempt per command: the unavailable-store tests stay fast.
		servertest.WithRedisOptions(func(ro *redis.Options) { ro.DialerRetries, ro.MaxRetries = 1, 1 }),
		servertest.WithStoreOptions(func(so *store.Options) { so.IdleTTL = o.idleTTL }),
		servertest.WithServerOptions(func(so *server.Options) {
			so.Heartbeat = o.heartbeat
			if o.server != nil {
				o.server(so)
			}
		}))
	ts.Mini.SetTime(t0)
	return &env{t: t, mini: ts.Mini, store: ts.Store, srv: ts.Server(), http: ts.HTTP(), now: t0}
}

// advance moves the Redis clock (TIME, which the scripts read) and its
// TTLs forward by d.
func (e *env) advance(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = e.now.Add(d)
	e.mini.SetTime(e.now)
	e.mini.FastForward(d)
}

// clock returns the Redis clock.
func (e *env) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *env) cooldown(opts ...connect.ClientOption) cooldownv1connect.CooldownServiceClient {
	return cooldownv1connect.NewCooldownServiceClient(e.http.Client(), e.http.URL, opts...)
}

func (e *env) admin(opts ...connect.ClientOption) cooldownv1connect.AdminServiceClient {
	return cooldownv1connect.NewAdminServiceClient(e.http.Client(), e.http.URL, opts...)
}

// withToken returns a client of the server that sends a bearer token on
// every request, unary and streaming.
func (e *env) withToken(tok string) *http.Client {
	c := *e.http.Client()
	c.Transport = servertest.Bearer(c.Transport, tok)
	return &c
}

// newID returns a fresh random connection id.
func newID() []byte { return servertest.NewID() }

func conn(id []byte) *cooldownv1.Connection { return &cooldownv1.Connection{Id: id} }

func admitReq(ids ...[]byte) *connect.Request[cooldownv1.AdmitRequest] {
	req := &cooldownv1.AdmitRequest{}
	for _, id := range ids {
		req.Candidates = append(req.Candidates, conn(id))
	}
	return connect.NewRequest(req)
}

// admit admits one call to id and fails the test on an error.
func admit(t *testing.T, c cooldownv1connect.CooldownServiceClient, ids ...[]byte) *cooldownv1.AdmitResponse {
	t.Helper()
	res, err := c.Admit(t.Context(), admitReq(ids...))
	require.NoError(t, err)
	return res.Msg
}

// rateLimit reports a 429 with the given Retry-After on id.
func rateLimit(t *testing.T, c cooldownv1connect.CooldownServiceClient, id []byte, retry time.Duration) *cooldownv1.ReportResponse {
	t.Helper()
	res, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: conn(id), Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED,
		RetryAfter: durationpb.New(retry), HttpStatus: 429, ErrorCode: "rate_limit_exceeded",
	}))
	require.NoError(t, err)
	return res.Msg
}

// requireCode asserts err is a Connect error with code and a message
// mentioning every one of contains.
func requireCode(t *testing.T, err error, code connect.Code, contains ...string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, connect.CodeOf(err), "error: %v", err)
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	for _, s := range contains {
		assert.Contains(t, ce.Message(), s)
	}
}

// get fetches an http path of the server.
func (e *env) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.http.URL+path, nil)
	require.NoError(t, err)
	res, err := e.http.Client().Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	var b bytes.Buffer
	_, err = b.ReadFrom(res.Body)
	require.NoError(t, err)
	return res.StatusCode, b.String()
}
