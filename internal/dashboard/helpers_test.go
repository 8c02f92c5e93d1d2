package dashboard_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// The tokens of servertest's table: tenant "acme" (servertest.Tenant)
// with every role, a client of the other tenant, and an operator who
// reads every tenant.
const (
	adminToken    = servertest.AdminToken
	viewerToken   = servertest.ViewerToken
	clientToken   = servertest.ClientToken
	otherToken    = servertest.OtherToken
	operatorToken = servertest.OperatorToken
	otherTenant   = servertest.OtherTenant
)

// liveServer is servertest's cooldownd with the dashboard's policy and
// heartbeat. restart stops it the hard way (streams end, connections
// drop) and serves again on the same address and store, as a redeploy
// would.
type liveServer struct {
	*servertest.Server
	t *testing.T
}

// newLiveServer starts a server with the token table tab (nil: no auth).
func newLiveServer(t *testing.T, tab server.Authenticator) *liveServer {
	t.Helper()
	// Breaker opens last minutes, not the default 10 s, so a tripped row is
	// still open when a slow machine gets to look at it.
	p := breaker.DefaultPolicy()
	p.OpenBase, p.OpenMax = 2*time.Minute, 10*time.Minute
	opts := []servertest.Option{servertest.WithPolicy(p),
		servertest.WithServerOptions(func(o *server.Options) { o.Heartbeat = time.Second })}
	if tab != nil {
		opts = append(opts, servertest.WithAuth(tab))
	}
	return &liveServer{Server: servertest.Start(t, opts...), t: t}
}

func (l *liveServer) restart() {
	l.t.Helper()
	require.NoError(l.t, l.Restart(l.t.Context()))
}

// client returns Connect clients that send tok on every call.
func (l *liveServer) client(tok string) (cooldownv1connect.CooldownServiceClient, cooldownv1connect.AdminServiceClient) {
	hc := &http.Client{Transport: servertest.Bearer(http.DefaultTransport, tok), Timeout: 10 * time.Second}
	return cooldownv1connect.NewCooldownServiceClient(hc, l.URL), cooldownv1connect.NewAdminServiceClient(hc, l.URL)
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
