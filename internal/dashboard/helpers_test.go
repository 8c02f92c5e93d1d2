package dashboard_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/auth"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/store"
)

// Tokens of the test tenant "acme".
const (
	adminToken  = "test-admin-token"
	viewerToken = "test-viewer-token"
	clientToken = "test-client-token"
	// betaToken is a client of the tenant "beta"; operatorToken reads
	// every tenant.
	betaToken     = "test-beta-client-token"
	operatorToken = "test-operator-token"
)

// testAuth is the real token table (internal/auth) over the test tokens
// of tenant "acme".
func testAuth(t testing.TB) *auth.Table {
	t.Helper()
	tab, err := auth.Parse([]byte(`tokens:
  - {name: ops-admin, tenant: acme, role: admin, token: "` + adminToken + `"}
  - {name: ops-viewer, tenant: acme, role: viewer, token: "` + viewerToken + `"}
  - {name: app, tenant: acme, role: client, token: "` + clientToken + `"}
  - {name: beta-app, tenant: beta, role: client, token: "` + betaToken + `"}
  - {name: oncall, role: operator, token: "` + operatorToken + `"}
`))
	require.NoError(t, err)
	return tab
}

// liveServer is cooldownd on a real loopback listener over a store on
// miniredis. restart stops it the hard way (streams end, connections drop)
// and starts a new server on the same address and store, as a redeploy
// would.
type liveServer struct {
	t    *testing.T
	st   *store.Store
	auth server.Authenticator
	addr string

	mu  sync.Mutex
	srv *server.Server
	hs  *http.Server
}

func newLiveServer(t *testing.T, auth server.Authenticator) *liveServer {
	t.Helper()
	_, rdb := redistest.Mini(t)
	// Breaker opens last minutes, not the default 10 s, so a tripped row is
	// still open when a slow machine gets to look at it.
	p := breaker.DefaultPolicy()
	p.OpenBase, p.OpenMax = 2*time.Minute, 10*time.Minute
	st, err := store.New(rdb, store.Options{Policy: &p})
	require.NoError(t, err)
	l := &liveServer{t: t, st: st, auth: auth, addr: "127.0.0.1:0"}
	l.start()
	t.Cleanup(l.stop)
	return l
}

func (l *liveServer) URL() string { return "http://" + l.addr }

func (l *liveServer) start() {
	l.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the old socket may linger for a moment after a restart
		if ln, err = net.Listen("tcp", l.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(l.t, err)
	srv, err := server.New(server.Options{Store: l.st, Auth: l.auth, Logger: slog.New(slog.DiscardHandler), Heartbeat: time.Second})
	require.NoError(l.t, err)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	l.mu.Lock()
	l.addr, l.srv, l.hs = ln.Addr().String(), srv, hs
	l.mu.Unlock()
}

func (l *liveServer) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.srv != nil {
		l.srv.Close()
		_ = l.hs.Close()
		l.srv, l.hs = nil, nil
	}
}

func (l *liveServer) restart() {
	l.stop()
	l.start()
}

// client returns Connect clients that send tok on every call.
func (l *liveServer) client(tok string) (cooldownv1connect.CooldownServiceClient, cooldownv1connect.AdminServiceClient) {
	hc := &http.Client{Transport: bearer{tok: tok}, Timeout: 10 * time.Second}
	return cooldownv1connect.NewCooldownServiceClient(hc, l.URL()), cooldownv1connect.NewAdminServiceClient(hc, l.URL())
}

type bearer struct{ tok string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.tok != "" {
		r.Header.Set("Authorization", "Bearer "+b.tok)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func newID(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// report sends one report and fails the test on an error.
func report(ctx context.Context, t *testing.T, c cooldownv1connect.CooldownServiceClient, id []byte, label string, o cooldownv1.Outcome, status uint32, code string, retry time.Duration) *cooldownv1.ReportResponse {
	t.Helper()
	req := &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id, Label: label}, Outcome: o, HttpStatus: status, ErrorCode: code}
	if retry > 0 {
		req.RetryAfter = durationpb.New(retry)
	}
	res, err := c.Report(ctx, connect.NewRequest(req))
	require.NoError(t, err)
	return res.Msg
}
