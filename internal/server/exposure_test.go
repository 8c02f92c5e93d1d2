package server_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/server"
)

// metricsToken is the bearer token /metrics requires when one is set.
const metricsToken = "metrics-token-0123456789"

// scrapeAs fetches the API port's /metrics with a bearer token (none when
// empty).
func (e *env) scrapeAs(t *testing.T, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.http.URL+"/metrics", nil)
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := e.http.Client().Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	var b bytes.Buffer
	_, err = b.ReadFrom(res.Body)
	require.NoError(t, err)
	return res.StatusCode, b.String()
}

// TestMetricsExposure: with auth on, the API port's /metrics (which lists
// the tenants' names in cooldownd_connections) answers only a caller with
// the metrics token; no token, a tenant's token or an admin's token is
// refused, and the refusal names no tenant. A server that serves metrics on
// a listener of its own (MetricsOff + MetricsHandler) serves them there.
// Without auth nothing changes: /metrics is open.
func TestMetricsExposure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		auth     bool
		token    string // Options.MetricsToken
		bearer   string
		wantCode int
	}{
		{"auth off", false, "", "", http.StatusOK},
		{"auth off with a metrics token, none sent", false, metricsToken, "", http.StatusUnauthorized},
		{"auth on, no metrics token, none sent", true, "", "", http.StatusForbidden},
		{"auth on, no metrics token, a client token", true, "", "a-client", http.StatusForbidden},
		{"auth on, no metrics token, an admin token", true, "", "a-admin", http.StatusForbidden},
		{"auth on, metrics token, none sent", true, metricsToken, "", http.StatusUnauthorized},
		{"auth on, metrics token, a tenant's token", true, metricsToken, "a-admin", http.StatusUnauthorized},
		{"auth on, metrics token sent", true, metricsToken, metricsToken, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := []envOption{withServer(func(o *server.Options) { o.MetricsToken = tt.token })}
			client := "" // the token of the caller that makes tenant-a known
			if tt.auth {
				opts = append(opts, withAuth(tokens))
				client = "a-client"
			}
			e := newEnv(t, opts...)
			c := e.cooldown()
			if client != "" {
				c = cooldownv1connect.NewCooldownServiceClient(e.withToken(client), e.http.URL)
			}
			admit(t, c, newID())

			code, body := e.scrapeAs(t, tt.bearer)
			assert.Equal(t, tt.wantCode, code)
			if tt.wantCode != http.StatusOK {
				assert.False(t, strings.Contains(body, "tenant-a"), "a refused scrape names a tenant: %.200q", body)
				assert.False(t, strings.Contains(body, "cooldownd_"), "a refused scrape serves metrics: %.200q", body)
				return
			}
			want := `tenant="tenant-a"`
			if !tt.auth {
				want = `tenant="default"`
			}
			assert.Contains(t, body, want, "the scrape lists the tenant")
		})
	}
}

// TestMetricsOwnListenerWithAuth: with auth on and /metrics left out of
// the API handler, MetricsHandler (what cooldownd mounts on --metrics-addr)
// serves the metrics without a token, and the API port has no /metrics.
func TestMetricsOwnListenerWithAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth(tokens), withServer(func(o *server.Options) { o.MetricsOff = true }))
	admit(t, cooldownv1connect.NewCooldownServiceClient(e.withToken("a-client"), e.http.URL), newID())

	rec := httptest.NewRecorder()
	e.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), `tenant="tenant-a"`)

	code, body := e.scrapeAs(t, "")
	assert.NotEqual(t, http.StatusOK, code)
	assert.False(t, strings.Contains(body, "tenant-a"), "the API port names a tenant: %.200q", body)
}

// TestReflectionNeedsToken: with auth on, gRPC reflection (which lists
// AdminService and every message) answers only an authenticated caller, of
// any role; without auth it stays open (TestReflection).
func TestReflectionNeedsToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		token string
		code  connect.Code // 0: served
	}{
		{"no token", "", connect.CodeUnauthenticated},
		{"unknown token", "not-a-token-0123456789", connect.CodeUnauthenticated},
		{"client", "a-client", 0},
		{"viewer", "b-viewer", 0},
		{"admin", "a-admin", 0},
	}
	for _, p := range protocols[:2] { // the reflection stream is bidirectional: Connect and gRPC only
		for _, tt := range tests {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, withAuth(tokens))
				hc := e.http.Client()
				if tt.token != "" {
					hc = e.withToken(tt.token)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // never hang the suite
				defer cancel()
				rc := grpcreflect.NewClient(hc, e.http.URL, p.opts...)
				stream := rc.NewStream(ctx)
				names, err := stream.ListServices()
				_, _ = stream.Close()
				if tt.code != 0 {
					require.Error(t, err, "reflection answered without a valid token")
					assert.Equal(t, tt.code, connect.CodeOf(err), "%v", err)
					assert.Empty(t, names)
				} else {
					require.NoError(t, err)
					var got []string
					for _, n := range names {
						got = append(got, string(n))
					}
					assert.Contains(t, got, cooldownv1connect.AdminServiceName)
				}

				// v1alpha (older grpcurl builds), by a raw call: the client
				// above falls back to it only on Unimplemented. An empty
				// request is one the service refuses, after auth.
				raw := connect.NewClient[emptypb.Empty, emptypb.Empty](hc,
					e.http.URL+"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", p.opts...)
				bidi := raw.CallBidiStream(ctx)
				_ = bidi.Send(&emptypb.Empty{})
				_ = bidi.CloseRequest()
				_, err = bidi.Receive()
				_ = bidi.CloseResponse()
				if tt.code != 0 {
					assert.Equal(t, tt.code, connect.CodeOf(err), "v1alpha: %v", err)
				} else {
					assert.NotEqual(t, connect.CodeUnauthenticated, connect.CodeOf(err), "v1alpha: %v", err)
				}
			})
		}
	}
}
