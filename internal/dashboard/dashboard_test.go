package dashboard_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/dashboard"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

func newHandler(t *testing.T, identify func(http.Header) (dashboard.Identity, error)) http.Handler {
	t.Helper()
	h, err := dashboard.New(dashboard.Options{Identify: identify, AuthEnabled: true, Now: func() time.Time { return time.UnixMilli(1700000000123) }})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", h)
	mux.Handle("/ui/", h)
	return mux
}

func do(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

func TestNewNeedsIdentify(t *testing.T) {
	t.Parallel()
	_, err := dashboard.New(dashboard.Options{})
	require.Error(t, err)
}

func TestServesPageAndAssets(t *testing.T) {
	t.Parallel()
	h := newHandler(t, func(http.Header) (dashboard.Identity, error) { return dashboard.Identity{}, nil })

	res := do(t, h, http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	csp := res.Header.Get("Content-Security-Policy")
	assert.Contains(t, csp, "script-src 'self'")
	assert.Contains(t, csp, "frame-ancestors 'none'")
	assert.NotContains(t, csp, "unsafe-inline")
	assert.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
	page := body(t, res)
	assert.Contains(t, page, `src="ui/app.js"`)
	// Offline: no absolute URL to another origin anywhere in the page.
	assert.NotContains(t, page, "http://")
	assert.NotContains(t, page, "https://")

	for _, tc := range []struct{ path, ctype string }{
		{"/ui/app.js", "javascript"},
		{"/ui/app.css", "text/css"},
		{"/ui/favicon.svg", "image/svg+xml"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res := do(t, h, http.MethodGet, tc.path, nil)
			require.Equal(t, http.StatusOK, res.StatusCode)
			assert.Contains(t, res.Header.Get("Content-Type"), tc.ctype)
			etag := res.Header.Get("ETag")
			require.NotEmpty(t, etag)
			assert.Equal(t, "no-cache", res.Header.Get("Cache-Control"))
			again := do(t, h, http.MethodGet, tc.path, map[string]string{"If-None-Match": etag})
			assert.Equal(t, http.StatusNotModified, again.StatusCode)
			assert.NotContains(t, body(t, res), "https://", "no CDN or remote asset")
		})
	}

	assert.Equal(t, http.StatusNotFound, do(t, h, http.MethodGet, "/ui/nope.js", nil).StatusCode)
	assert.NotEqual(t, http.StatusOK, do(t, h, http.MethodGet, "/ui/../go.mod", nil).StatusCode)
	assert.Equal(t, http.StatusNotFound, do(t, h, http.MethodGet, "/elsewhere", nil).StatusCode)
	assert.Equal(t, http.StatusMethodNotAllowed, do(t, h, http.MethodPost, "/ui/app.js", nil).StatusCode)
	red := do(t, h, http.MethodGet, "/ui/", nil)
	assert.Equal(t, http.StatusFound, red.StatusCode)
	assert.Equal(t, "/", red.Header.Get("Location"))
}

func TestWhoami(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		who    dashboard.Identity
		err    error
		status int
		code   string
	}{
		{"admin", dashboard.Identity{Tenant: "acme", Role: dashboard.RoleAdmin, Name: "ops"}, nil, http.StatusOK, ""},
		{"unauthenticated", dashboard.Identity{}, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown token")), http.StatusUnauthorized, "unauthenticated"},
		{"client token", dashboard.Identity{}, connect.NewError(connect.CodePermissionDenied, errors.New("role")), http.StatusForbidden, "permission_denied"},
		{"broken", dashboard.Identity{}, errors.New("boom"), http.StatusInternalServerError, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen string
			h := newHandler(t, func(h http.Header) (dashboard.Identity, error) {
				seen = h.Get("Authorization")
				return tc.who, tc.err
			})
			res := do(t, h, http.MethodGet, "/ui/api/whoami", map[string]string{"Authorization": "Bearer x"})
			assert.Equal(t, "Bearer x", seen)
			require.Equal(t, tc.status, res.StatusCode)
			assert.Equal(t, "no-store", res.Header.Get("Cache-Control"))
			var got map[string]any
			require.NoError(t, json.Unmarshal([]byte(body(t, res)), &got))
			if tc.err == nil {
				assert.Equal(t, map[string]any{"tenant": "acme", "role": "admin", "name": "ops", "auth": true, "now": float64(1700000000123)}, got)
				return
			}
			assert.Equal(t, tc.code, got["code"])
			assert.NotContains(t, got["message"], "boom", "internal errors stay internal")
		})
	}
}

// TestWhoamiThroughServer checks the server's wiring: the role each token
// gets, and that client tokens cannot open the dashboard.
func TestWhoamiThroughServer(t *testing.T) {
	t.Parallel()
	withAuth := newLiveServer(t, servertest.Tokens(t))
	noAuth := newLiveServer(t, nil)
	get := func(url, tok string) (int, map[string]any) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/ui/api/whoami", nil)
		require.NoError(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = res.Body.Close() }()
		var m map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&m))
		return res.StatusCode, m
	}
	for _, tc := range []struct {
		name, url, tok string
		status         int
		role, tenant   string
		auth           bool
	}{
		{"admin", withAuth.URL, adminToken, 200, "admin", "acme", true},
		{"viewer", withAuth.URL, viewerToken, 200, "viewer", "acme", true},
		{"client", withAuth.URL, clientToken, 403, "", "", false},
		{"unknown", withAuth.URL, "nope", 401, "", "", false},
		{"none", withAuth.URL, "", 401, "", "", false},
		{"auth off", noAuth.URL, "", 200, "admin", "default", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, m := get(tc.url, tc.tok)
			require.Equal(t, tc.status, status, "%v", m)
			if status != 200 {
				return
			}
			assert.Equal(t, tc.role, m["role"])
			assert.Equal(t, tc.tenant, m["tenant"])
			assert.Equal(t, tc.auth, m["auth"])
			assert.InDelta(t, float64(time.Now().UnixMilli()), m["now"], 5000)
		})
	}
	// The page itself needs no token: it asks for one.
	res, err := http.Get(withAuth.URL + "/")
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	b, _ := io.ReadAll(res.Body)
	assert.True(t, strings.Contains(string(b), "token-input"))
}
