package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/server"
)

// TestCORS: with origins configured, the API answers preflights and adds
// CORS headers for those origins only; without, it sends none.
func TestCORS(t *testing.T) {
	t.Parallel()
	const admit = "/cooldown.v1.CooldownService/Admit"
	allowed := newEnv(t, withServer(func(o *server.Options) { o.CORSOrigins = []string{"https://app.example.com"} }))
	star := newEnv(t, withServer(func(o *server.Options) { o.CORSOrigins = []string{"*"} }))
	off := newEnv(t)
	tests := []struct {
		name      string
		e         *env
		method    string
		origin    string
		status    int
		allow     string
		preflight bool
	}{
		{"preflight from an allowed origin", allowed, http.MethodOptions, "https://app.example.com", http.StatusNoContent, "https://app.example.com", true},
		{"preflight from another origin", allowed, http.MethodOptions, "https://evil.example", 0, "", true},
		{"call from an allowed origin", allowed, http.MethodPost, "https://app.example.com", http.StatusOK, "https://app.example.com", false},
		{"call from another origin", allowed, http.MethodPost, "https://evil.example", http.StatusOK, "", false},
		{"any origin", star, http.MethodOptions, "https://anything.example", http.StatusNoContent, "*", true},
		{"off", off, http.MethodOptions, "https://app.example.com", 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := strings.NewReader(`{"candidates":[{"id":"` + strings.Repeat("A", 43) + `="}]}`)
			req, err := http.NewRequestWithContext(t.Context(), tt.method, tt.e.http.URL+admit, body)
			require.NoError(t, err)
			req.Header.Set("Origin", tt.origin)
			req.Header.Set("Content-Type", "application/json")
			if tt.preflight {
				req.Header.Set("Access-Control-Request-Method", "POST")
				req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,connect-protocol-version")
			}
			res, err := tt.e.http.Client().Do(req)
			require.NoError(t, err)
			_ = res.Body.Close()
			if tt.status != 0 {
				assert.Equal(t, tt.status, res.StatusCode)
			}
			assert.Equal(t, tt.allow, res.Header.Get("Access-Control-Allow-Origin"))
			assert.Empty(t, res.Header.Get("Access-Control-Allow-Credentials"), "never credentials")
			if tt.allow != "" && tt.preflight {
				assert.Contains(t, res.Header.Get("Access-Control-Allow-Headers"), "Authorization")
				assert.Contains(t, res.Header.Get("Access-Control-Allow-Headers"), "Connect-Protocol-Version")
				assert.Contains(t, res.Header.Get("Access-Control-Allow-Methods"), "POST")
			}
			if tt.allow != "" && !tt.preflight {
				assert.Contains(t, res.Header.Get("Access-Control-Expose-Headers"), "Grpc-Status")
			}
		})
	}
}

func TestCORSOriginsAreChecked(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"app.example.com", "https://app.example.com/", "https://app.example.com/path", "ftp://x", "https://u:p@x"} {
		_, err := server.New(server.Options{Store: newEnv(t).store, CORSOrigins: []string{bad}})
		assert.Error(t, err, bad)
	}
}
