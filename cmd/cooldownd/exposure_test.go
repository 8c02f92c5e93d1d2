package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// TestAuthCoversMetricsAndReflection: with --tokens-file, /metrics (which
// names every tenant) is refused on --addr, with a warning at start, and
// served on --metrics-addr; reflection needs a token. Without auth both stay
// open (TestMetricsProtection, TestReflection in internal/server).
func TestAuthCoversMetricsAndReflection(t *testing.T) {
	t.Parallel()
	const tok = "team-a-token-0123456789abcdef"
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(path, []byte("tokens:\n  - {name: app, tenant: team-a, role: client, token: "+tok+"}\n"), 0o600))
	get := func(t *testing.T, url string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = res.Body.Close() }()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}

	t.Run("on the API port", func(t *testing.T) {
		t.Parallel()
		in := start(t, "--addr", "127.0.0.1:0", "--tokens-file", path, "--log-format", "json")
		require.NoError(t, admitOnce(t, cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url(), withToken(tok))))
		code, body := get(t, in.url()+"/metrics")
		assert.Equal(t, http.StatusForbidden, code)
		assert.NotContains(t, body, "team-a")
		assert.Contains(t, body, "--metrics-addr")
		assert.Len(t, in.logs.Find("/metrics is refused on --addr with --tokens-file: give --metrics-addr (a port for Prometheus only) or --metrics-token-file"), 1)

		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		for _, tt := range []struct {
			name string
			opts []connect.ClientOption
			code connect.Code
		}{{"no token", nil, connect.CodeUnauthenticated}, {"token", []connect.ClientOption{withStreamToken(tok)}, 0}} {
			stream := grpcreflect.NewClient(h2c(), in.url(), append(tt.opts, connect.WithGRPC())...).NewStream(ctx)
			names, err := stream.ListServices()
			_, _ = stream.Close()
			if tt.code != 0 {
				assert.Equal(t, tt.code, connect.CodeOf(err), "%s: %v", tt.name, err)
				continue
			}
			require.NoError(t, err, tt.name)
			assert.NotEmpty(t, names)
		}
	})
	t.Run("on its own address", func(t *testing.T) {
		t.Parallel()
		in := start(t, "--addr", "127.0.0.1:0", "--tokens-file", path, "--metrics-addr", "127.0.0.1:0", "--log-format", "json")
		require.NoError(t, admitOnce(t, cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url(), withToken(tok))))
		lines := in.logs.Find("cooldownd serving")
		require.Len(t, lines, 1)
		code, body := get(t, "http://"+lines[0].Str("metrics")+"/metrics")
		assert.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, `tenant="team-a"`)
		assert.Empty(t, in.logs.Find("/metrics is refused on --addr with --tokens-file: give --metrics-addr (a port for Prometheus only) or --metrics-token-file"))
	})
}

// withStreamToken sends a bearer token on streaming calls too.
func withStreamToken(tok string) connect.ClientOption {
	return connect.WithInterceptors(streamToken(tok))
}

type streamToken string

func (s streamToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (s streamToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(s))
		return conn
	}
}

func (s streamToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
