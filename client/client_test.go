package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
)

func TestNew(t *testing.T) {
	t.Parallel()
	bad := DefaultPolicy()
	bad.MaxProbes = 0
	tests := []struct {
		name string
		url  string
		opts []Option
		err  string
	}{
		{name: "http", url: "http://localhost:8080"},
		{name: "https with path", url: "https://cooldownd.example.com/base/"},
		{name: "no scheme", url: "localhost:8080", err: "http:// or https://"},
		{name: "other scheme", url: "ftp://host", err: "http:// or https://"},
		{name: "userinfo", url: "http://user:secret@host", err: "must not hold credentials"},
		{name: "short salt", url: "http://h", opts: []Option{WithSalt([]byte("short"))}, err: "salt"},
		{name: "bad policy", url: "http://h", opts: []Option{WithLocalPolicy(bad)}, err: "local policy: Policy.MaxProbes must be in [1, 16], got 0"},
		{name: "bad fail mode", url: "http://h", opts: []Option{WithFailMode(7)}, err: "fail mode"},
		{name: "nil option", url: "http://h", opts: []Option{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(tt.url, tt.opts...)
			if tt.err == "" {
				require.NoError(t, err)
				assert.NotNil(t, c)
				require.NoError(t, c.Close()) // its mirror's goroutines end with it
				return
			}
			require.ErrorContains(t, err, tt.err)
			assert.NotContains(t, err.Error(), "secret")
		})
	}
}

func TestOptionDefaults(t *testing.T) {
	t.Parallel()
	c, err := New("http://h", WithAdmitTimeout(0), WithMaxRetries(-1), WithMaxWait(0), WithBackoff(0, 0), WithHTTPClient(nil), WithLogger(nil))
	require.NoError(t, err)
	assert.Equal(t, DefaultAdmitTimeout, c.cfg.admitTimeout)
	assert.Equal(t, DefaultMaxRetries, c.cfg.maxRetries)
	assert.Equal(t, DefaultRules().MaxServerDelay, c.cfg.maxWait)
	assert.Equal(t, DefaultBackoffBase, c.cfg.backoffBase)
	assert.Equal(t, DefaultBackoffCap, c.cfg.backoffCap)
	assert.Equal(t, FailOpen, c.cfg.failMode)
	require.NoError(t, c.Close())
}

func TestConnection(t *testing.T) {
	t.Parallel()
	c := newClient(t, "http://h")
	tests := []struct {
		name                             string
		provider, endpoint, scope, label string
		want                             string // label
		err                              bool
	}{
		{name: "default label", provider: "OpenAI", endpoint: "https://api.openai.com/v1", scope: "gpt-4o", want: "openai gpt-4o "},
		{name: "default label no scope", provider: "anthropic", endpoint: "https://api.anthropic.com", want: "anthropic "},
		{name: "own label", provider: "openai", endpoint: "https://api.openai.com/v1", label: " prod gpt-4o ", want: "prod gpt-4o"},
		{name: "long scope cut", provider: "openai", endpoint: "https://api.openai.com/v1", scope: strings.Repeat("é", 40), want: "openai é"},
		{name: "label too long", provider: "openai", endpoint: "https://api.openai.com/v1", label: strings.Repeat("x", MaxLabelLen+1), err: true},
		{name: "label not printable", provider: "openai", endpoint: "https://api.openai.com/v1", label: "a\x00b", err: true},
		{name: "bad endpoint", provider: "openai", endpoint: "not a url", err: true},
		{name: "bad provider", provider: "", endpoint: "https://api.openai.com/v1", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cn, err := c.Connection(tt.provider, tt.endpoint, "sk-test-key", tt.scope, tt.label)
			if tt.err {
				require.ErrorIs(t, err, ErrInvalidConn)
				assert.NotContains(t, err.Error(), "sk-test-key")
				return
			}
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(cn.Label(), tt.want), "label %q", cn.Label())
			if tt.label == "" {
				assert.True(t, strings.HasSuffix(cn.Label(), " "+cn.ID().Short()+"…"), "a default label ends with the short id: %q", cn.Label())
			}
			assert.LessOrEqual(t, len(cn.Label()), MaxLabelLen)
			assert.False(t, cn.IsZero())
		})
	}

	a, err := c.Connection("openai", "https://API.openai.com/v1/", "k1", "", "")
	require.NoError(t, err)
	b, err := c.Connection("openai", "https://api.openai.com/v1", "k1", "", "other")
	require.NoError(t, err)
	assert.Equal(t, a.ID(), b.ID(), "equal endpoints derive equal ids")
	salted := newClient(t, "http://h", WithSalt([]byte("0123456789abcdef")))
	s, err := salted.Connection("openai", "https://api.openai.com/v1", "k1", "", "")
	require.NoError(t, err)
	assert.NotEqual(t, a.ID(), s.ID(), "the salt keys the id")
	assert.Equal(t, "openai "+a.ID().Short()+"…", a.String())
	id, err := ParseID(a.ID().String())
	require.NoError(t, err)
	assert.Equal(t, a, NewConn(id, a.Label()))
}

func TestEnumNames(t *testing.T) {
	t.Parallel()
	for d := DecisionAllow; d <= DecisionDeny; d++ {
		assert.NotContains(t, d.String(), "decision(", "decision %d", d)
	}
	assert.Equal(t, "none", ReasonNone.String())
	for r := ReasonCooldown; r <= ReasonOverloaded; r++ {
		assert.Equal(t, cooldownv1.DenyReason(r).String(), "DENY_REASON_"+strings.ToUpper(r.String()), "matches the wire enum")
	}
	assert.Equal(t, "unavailable", ReasonUnavailable.String())
	for d := DecisionAllow; d <= DecisionDeny; d++ {
		assert.Equal(t, cooldownv1.Decision(d).String(), "DECISION_"+strings.ToUpper(d.String()), "matches the wire enum")
	}
	for o := OutcomeSuccess; o <= OutcomeCanceled; o++ {
		assert.Equal(t, cooldownv1.Outcome(o).String(), "OUTCOME_"+strings.ToUpper(o.String()), "matches the wire enum")
	}
	assert.Equal(t, breaker.OutcomeSuccess, breaker.Outcome(OutcomeSuccess), "the local breaker shares the numbering")
	assert.Equal(t, breaker.OutcomeCanceled, breaker.Outcome(OutcomeCanceled))
	assert.Equal(t, "fail_open", FailOpen.String())
	assert.Equal(t, "fail_closed", FailClosed.String())
	assert.Equal(t, "fail_mode(9)", FailMode(9).String())
	assert.Equal(t, "decision(0)", Decision(0).String())
}

func TestAdmitReportExtend(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	c := newClient(t, cd.URL)
	primary := conn(t, c, "https://api.openai.com/v1", "key-p", "gpt-4o")
	fallback := conn(t, c, "https://api.anthropic.com", "key-f", "claude")
	ctx := t.Context()

	a, err := c.Admit(ctx, primary, fallback)
	require.NoError(t, err)
	assert.Equal(t, DecisionAllow, a.Decision)
	assert.Equal(t, 0, a.Index)
	assert.Equal(t, primary, a.Conn)
	assert.False(t, a.Local)
	require.NoError(t, c.Report(ctx, a, Classification{Outcome: OutcomeRateLimited, RetryAfter: 10 * time.Second, HTTPStatus: 429}))

	a, err = c.Admit(ctx, primary, fallback)
	require.NoError(t, err)
	assert.Equal(t, 1, a.Index, "the primary cools down; the fallback is admitted")
	assert.Equal(t, fallback, a.Conn)

	a, err = c.Admit(ctx, primary)
	require.NoError(t, err)
	assert.Equal(t, DecisionDeny, a.Decision)
	assert.Equal(t, ReasonCooldown, a.Reason)
	assert.InDelta(t, 10*time.Second, a.RetryAfter, float64(time.Second))

	// Trip the fallback, let it turn half-open, probe, extend, close.
	for range 2 {
		a, err := c.Admit(ctx, fallback)
		require.NoError(t, err)
		require.NoError(t, c.Report(ctx, a, Classification{Outcome: OutcomeTransientFailure, HTTPStatus: 500}))
	}
	time.Sleep(150 * time.Millisecond)
	probe, err := c.Admit(ctx, fallback)
	require.NoError(t, err)
	require.Equal(t, DecisionAllowProbe, probe.Decision)
	require.NotEmpty(t, probe.LeaseToken)
	until, err := c.ExtendLease(ctx, probe, time.Minute)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Minute), until, 5*time.Second)
	require.NoError(t, c.Report(ctx, probe, Classification{Outcome: OutcomeSuccess, HTTPStatus: 200}))
	// With the mirror (the default) too: cooldownd has a probe's success
	// when Report returns.
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, cd.get(t, fallback).GetConnection().GetState())

	_, err = c.ExtendLease(ctx, probe, 0)
	require.Error(t, err, "the lease was released by the report")
	require.Error(t, c.Report(ctx, Admission{}, Classification{Outcome: OutcomeSuccess}))
	require.Error(t, c.Report(ctx, a, Classification{}))
	_, err = c.Admit(ctx)
	require.ErrorIs(t, err, ErrInvalidConn)
	_, err = c.Admit(ctx, make([]Conn, MaxCandidates+1)...)
	require.ErrorIs(t, err, ErrInvalidConn)
}

func TestLocalExtendLease(t *testing.T) {
	t.Parallel()
	p := fastPolicy()
	c := newClient(t, "http://127.0.0.1:1", WithLocalPolicy(policyOf(p)))
	cn := NewConn(ID{7}, "local")
	for range 2 {
		a, err := c.Admit(t.Context(), cn)
		require.NoError(t, err)
		require.True(t, a.Local)
		require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeTransientFailure}))
	}
	time.Sleep(p.OpenBase + 10*time.Millisecond)
	probe, err := c.Admit(t.Context(), cn)
	require.NoError(t, err)
	require.Equal(t, DecisionAllowProbe, probe.Decision)
	until, err := c.ExtendLease(t.Context(), probe, time.Minute)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Minute), until, time.Second)
}

func TestTokenSent(t *testing.T) {
	t.Parallel()
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, WithToken("t0ken"))
	_, err := c.Admit(t.Context(), NewConn(ID{1}, "x"))
	require.Error(t, err, "a rejected token is an error, not an outage")
	assert.NotErrorIs(t, err, ErrUnavailable)
	assert.False(t, c.Degraded())
	assert.Equal(t, "Bearer t0ken", auth.Load())
}

func TestTokenAuth(t *testing.T) {
	t.Parallel()
	cd := startCooldowndAuth(t, fastPolicy(), tokens{"good-token-0123456789": true})
	tests := []struct {
		name    string
		opts    []Option
		wantErr bool
	}{
		{name: "valid token", opts: []Option{WithToken("good-token-0123456789")}},
		{name: "wrong token", opts: []Option{WithToken("bad-token")}, wantErr: true},
		{name: "no token", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, cd.URL, tt.opts...)
			a, err := c.Admit(t.Context(), NewConn(ID{1}, "auth test"))
			assert.False(t, c.Degraded(), "a refused token is not an outage")
			if tt.wantErr {
				require.Error(t, err)
				assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err))
				return
			}
			require.NoError(t, err)
			assert.False(t, a.Local)
			require.NoError(t, c.Report(t.Context(), a, Classification{Outcome: OutcomeSuccess}))
		})
	}
}

func TestTransportProtocols(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		h2c       bool
		wantProto string
	}{
		// Unary calls go over HTTP/1.1 even to an h2c server
		// (docs/decisions/0052-unary-calls-over-http1.md).
		{name: "h2c server", h2c: true, wantProto: "HTTP/1.1"},
		{name: "HTTP/1.1-only server", h2c: false, wantProto: "HTTP/1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var proto atomic.Value
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				proto.Store(r.Proto)
				http.Error(w, "nope", http.StatusNotFound)
			}))
			if tt.h2c {
				var p http.Protocols
				p.SetHTTP1(true)
				p.SetUnencryptedHTTP2(true)
				srv.Config.Protocols = &p
			}
			srv.Start()
			t.Cleanup(srv.Close)
			c := newClient(t, srv.URL)
			for range 2 {
				_, err := c.Admit(context.Background(), NewConn(ID{1}, "x"))
				require.Error(t, err)
				assert.Equal(t, tt.wantProto, proto.Load())
			}
		})
	}
}

func TestTransportTLS(t *testing.T) {
	t.Parallel()
	var proto atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto)
		http.Error(w, "nope", http.StatusNotFound)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	hc := newHTTPClient("https")
	hc.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	c := newClient(t, srv.URL, WithHTTPClient(hc))
	_, err := c.Admit(t.Context(), NewConn(ID{1}, "x"))
	require.Error(t, err)
	assert.Equal(t, "HTTP/2.0", proto.Load(), "https negotiates HTTP/2 with ALPN")
}
