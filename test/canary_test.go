//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cooldownd/cooldownd/internal/logtest"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/client"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

const (
	keyCanary    = "sk-CANARYkey0123456789abcdefDEADBEEF"
	promptCanary = "PROMPT-CANARY-what-is-the-secret-plan"
)

type syncBuffer = logtest.Buffer

// canaryForms are the ways a canary could leak: raw, hex, base64.
func canaryForms(s string) []string {
	return []string{s, hex.EncodeToString([]byte(s)), base64.StdEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s))}
}

// TestNoSecretReachesCooldownd drives the client with a canary API key and
// a canary prompt through every path and asserts that neither reaches
// cooldownd's requests, its logs, Redis or the dashboard's data.
func TestNoSecretReachesCooldownd(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	p := breaker.DefaultPolicy()
	p.ConsecutiveFailures = 2
	p.OpenBase = 50 * time.Millisecond
	p.OpenMax = 100 * time.Millisecond
	var serverLog, clientLog syncBuffer
	cd := servertest.Start(t, servertest.WithRedis(rdb), servertest.WithPolicy(p), servertest.WithRecording(),
		servertest.WithServerOptions(func(o *server.Options) {
			o.Logger = slog.New(slog.NewJSONHandler(&serverLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}))

	// The provider answers every failure class, echoing the prompt and the
	// key in its bodies the way real error messages sometimes do.
	statuses := []struct {
		status int
		header string
		body   string
	}{
		{200, "", `{"ok":"` + promptCanary + `"}`},
		{500, "", `{"error":{"message":"` + promptCanary + `"}}`},
		{429, "Retry-After: 1", `{"error":{"type":"rate_limit_exceeded","message":"` + keyCanary + `"}}`},
		{529, "", `{"type":"error","error":{"type":"overloaded_error","message":"` + promptCanary + `"}}`},
		{429, "", `{"error":{"code":"insufficient_quota","message":"key ` + keyCanary + `"}}`},
		{401, "", `{"error":{"message":"Incorrect API key provided: ` + keyCanary + `"}}`},
		{400, "", `{"error":{"message":"bad prompt ` + promptCanary + `"}}`},
		{503, "", `not json ` + promptCanary},
	}
	var step sync.Mutex
	idx := 0
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		step.Lock()
		s := statuses[idx%len(statuses)]
		idx++
		step.Unlock()
		if k, v, ok := strings.Cut(s.header, ": "); ok {
			w.Header().Set(k, v)
		}
		w.Header().Set("x-ratelimit-remaining-requests", "0")
		w.Header().Set("x-ratelimit-reset-requests", "1s")
		w.WriteHeader(s.status)
		_, _ = io.WriteString(w, s.body)
	}))
	t.Cleanup(provider.Close)

	log := slog.New(slog.NewJSONHandler(&clientLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cl, err := client.New(cd.URL, client.WithLogger(log), client.WithNoWait(), client.WithBackoff(time.Millisecond, 5*time.Millisecond),
		client.WithAdmitTimeout(10*time.Second)) // every report reaches the server, even on a loaded machine
	require.NoError(t, err)
	defer func() { _ = cl.Close() }()
	primary, err := cl.Connection("openai", provider.URL, keyCanary, "gpt-4o", "")
	require.NoError(t, err)
	fallback, err := cl.Connection("openai", provider.URL, keyCanary+"-2", "gpt-4o-mini", "openai mini")
	require.NoError(t, err)
	call := func(ctx context.Context, _ client.Conn) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL+"/v1/chat/completions", strings.NewReader(`{"messages":[{"content":"`+promptCanary+`"}]}`))
		req.Header.Set("Authorization", "Bearer "+keyCanary)
		return http.DefaultClient.Do(req)
	}
	ctx := context.Background()
	for range 3 * len(statuses) {
		if resp, err := cl.DoFallback(ctx, []client.Conn{primary, fallback}, call); err == nil {
			_ = resp.Body.Close()
		}
		if resp, err := cl.Do(ctx, primary, func(ctx context.Context) (*http.Response, error) { return call(ctx, primary) }); err == nil {
			_ = resp.Body.Close()
		}
	}
	// The RoundTripper path, as an SDK would use it.
	sdk := &http.Client{Transport: cl.RoundTripper(fallback, http.DefaultTransport)}
	for range len(statuses) {
		req, _ := http.NewRequest(http.MethodPost, provider.URL+"/v1/x", strings.NewReader(promptCanary))
		req.Header.Set("Authorization", "Bearer "+keyCanary)
		if resp, err := sdk.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}
	// Local mode: cooldownd unreachable, the client decides in-process.
	down, err := client.New("http://127.0.0.1:1", client.WithLogger(log), client.WithNoWait())
	require.NoError(t, err)
	local, err := down.Connection("openai", provider.URL, keyCanary, "", "")
	require.NoError(t, err)
	for range len(statuses) {
		if resp, err := down.Do(ctx, local, func(ctx context.Context) (*http.Response, error) { return call(ctx, local) }); err == nil {
			_ = resp.Body.Close()
		}
	}
	require.True(t, down.Degraded(), "the local path was exercised")

	// Everything Redis holds.
	var dump bytes.Buffer
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		dump.WriteString(k + "\n")
		switch rdb.Type(ctx, k).Val() {
		case "hash":
			for f, v := range rdb.HGetAll(ctx, k).Val() {
				dump.WriteString(f + "=" + v + "\n")
			}
		case "list":
			dump.WriteString(strings.Join(rdb.LRange(ctx, k, 0, -1).Val(), "\n"))
		case "zset":
			dump.WriteString(strings.Join(rdb.ZRange(ctx, k, 0, -1).Val(), "\n"))
		case "string":
			dump.WriteString(rdb.Get(ctx, k).Val())
		}
		raw, _ := rdb.Dump(ctx, k).Result()
		dump.WriteString(raw)
	}
	// What the dashboard shows: List, Get with history, as JSON.
	api := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, cd.URL)
	list, err := api.ListConnections(ctx, connect.NewRequest(&cooldownv1.ListConnectionsRequest{}))
	require.NoError(t, err)
	require.NotEmpty(t, list.Msg.GetConnections())
	var dash bytes.Buffer
	dash.WriteString(protojson.Format(list.Msg))
	for _, c := range list.Msg.GetConnections() {
		got, err := api.GetConnection(ctx, connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: c.GetConnection().GetId(), HistoryLimit: 50}))
		require.NoError(t, err)
		dash.WriteString(protojson.Format(got.Msg))
	}
	requests := string(cd.Wire())
	require.Contains(t, requests, "/cooldown.v1.CooldownService/Report", "reports reached cooldownd")
	require.Contains(t, requests, "openai mini", "request bodies are captured (labels travel in them)")
	require.Contains(t, dump.String(), "openai mini", "the dump holds the stored labels")

	places := map[string]string{
		"requests to cooldownd": requests, "server logs": serverLog.String(), "client logs": clientLog.String(),
		"redis": dump.String(), "dashboard data": dash.String(),
	}
	for _, canary := range []string{keyCanary, keyCanary + "-2", promptCanary, "CANARYkey", "secret-plan"} {
		for _, form := range canaryForms(canary) {
			for where, text := range places {
				assert.NotContains(t, text, form, "canary %q leaked into %s", canary, where)
			}
		}
	}
}
