// Package dashboard serves cooldownd's web dashboard: a single page, embedded
// with go:embed, that lists a tenant's connections and follows them live.
//
// The page is plain HTML, CSS and JavaScript with no build step and no
// third-party code, so it works offline. It talks to the Connect JSON API of
// the server that serves it (ListConnections, GetConnection, the
// WatchConnections stream and the admin overrides) with the caller's bearer
// token, which it keeps in sessionStorage. The only endpoint of its own is
// GET /ui/api/whoami, which tells the page the caller's tenant and role.
//
// The package does not import the server: the server passes an
// [Options.Identify] func that authenticates a request's headers.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"
)

//go:embed assets
var assets embed.FS

// Roles that [Identity.Role] may hold.
const (
	RoleViewer = "viewer"
	RoleAdmin  = "admin"
	// RoleOperator reads every tenant's connections: the page shows a
	// tenant column when rows of several tenants are present, and no
	// override buttons.
	RoleOperator = "operator"
)

// Identity is the caller as the dashboard sees it.
type Identity struct {
	// Tenant is the caller's tenant; empty for [RoleOperator].
	Tenant string `json:"tenant"`
	// Role is [RoleViewer], [RoleAdmin] or [RoleOperator]. Only admins see
	// the override buttons (the server enforces the role on every call
	// anyway).
	Role string `json:"role"`
	// Name is the token's name, shown in the header.
	Name string `json:"name"`
}

// Options configure [New].
type Options struct {
	// Identify authenticates a request's headers (its bearer token) and
	// returns the caller, who must be allowed to read connections. Its error
	// is a Connect error: CodeUnauthenticated makes whoami answer 401 (the
	// page then asks for a token), CodePermissionDenied 403. Required.
	Identify func(h http.Header) (Identity, error)
	// AuthEnabled tells the page whether tokens are in use, so it can offer
	// to sign out and show the Authorization header in its examples.
	AuthEnabled bool
	// Now is the server clock sent in whoami, which the page uses to count
	// down cooldowns in server time (zero: time.Now).
	Now func() time.Time
}

// asset is one embedded file, ready to serve.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the dashboard. Mount it at "GET /{$}" (the page) and
// "/ui/" (its assets and whoami).
type Handler struct {
	identify func(http.Header) (Identity, error)
	auth     bool
	now      func() time.Time
	files    map[string]asset
}

// New returns the dashboard handler. It returns an error when
// Options.Identify is nil.
func New(o Options) (*Handler, error) {
	if o.Identify == nil {
		return nil, errors.New("dashboard: Options.Identify is required")
	}
	h := &Handler{identify: o.Identify, auth: o.AuthEnabled, now: o.Now, files: map[string]asset{}}
	if h.now == nil {
		h.now = time.Now
	}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = http.DetectContentType(b)
		}
		h.files[strings.TrimPrefix(p, "assets/")] = asset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// csp allows only the dashboard's own files and same-origin fetches: no
// inline script or style, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP serves "/" (the page), "/ui/api/whoami" and the files under
// "/ui/".
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch p := r.URL.Path; {
	case p == "/":
		h.serveFile(w, r, "index.html")
	case p == "/ui/" || p == "/ui/index.html":
		// The page uses URLs relative to "/", so it lives there only.
		http.Redirect(w, r, "../", http.StatusFound)
	case p == "/ui/api/whoami":
		h.whoami(w, r)
	case strings.HasPrefix(p, "/ui/"):
		h.serveFile(w, r, strings.TrimPrefix(p, "/ui/"))
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := h.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", a.ctype)
	hd.Set("ETag", a.etag)
	// Revalidate every time (cheap: a 304 on the ETag) so an upgraded server
	// never serves a stale page against a newer API.
	hd.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}

// whoamiResponse is the JSON of GET /ui/api/whoami.
type whoamiResponse struct {
	Identity
	// Auth is whether the server checks tokens.
	Auth bool `json:"auth"`
	// Now is the server clock in Unix milliseconds.
	Now int64 `json:"now"`
}

type errorResponse struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (h *Handler) whoami(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	who, err := h.identify(r.Header)
	if err != nil {
		code := connect.CodeOf(err)
		status := http.StatusInternalServerError
		msg := "internal error"
		switch code {
		case connect.CodeUnauthenticated:
			status, msg = http.StatusUnauthorized, "a viewer, admin or operator bearer token is required"
			w.Header().Set("WWW-Authenticate", `Bearer realm="cooldownd"`)
		case connect.CodePermissionDenied:
			status, msg = http.StatusForbidden, "this token's role cannot view the dashboard; use a viewer, admin or operator token"
		}
		writeJSON(w, status, errorResponse{Code: code.String(), Message: msg})
		return
	}
	writeJSON(w, http.StatusOK, whoamiResponse{Identity: who, Auth: h.auth, Now: h.now().UnixMilli()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
