package servertest

import (
	"crypto/rand"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cooldownd/cooldownd/internal/auth"
	"github.com/cooldownd/cooldownd/internal/breaker"
)

// The test tokens of [Tokens]: an admin, a viewer and a client of tenant
// Tenant, a client of the second tenant OtherTenant, and an operator who
// reads every tenant.
const (
	Tenant      = "acme"
	OtherTenant = "globex"

	AdminToken    = "test-admin-token-4f1c"
	ViewerToken   = "test-viewer-token-9a2e"
	ClientToken   = "test-client-token-77b0"
	OtherToken    = "test-globex-client-token-0c9d"
	OperatorToken = "test-operator-token-31d5"
)

// tokensFile is the token file of [Tokens], in cmd/cooldownd's format.
const tokensFile = `tokens:
  - {name: oncall, tenant: acme, role: admin, token: "` + AdminToken + `"}
  - {name: viewer, tenant: acme, role: viewer, token: "` + ViewerToken + `"}
  - {name: app, tenant: acme, role: client, token: "` + ClientToken + `"}
  - {name: globex-app, tenant: globex, role: client, token: "` + OtherToken + `"}
  - {name: sre, role: operator, token: "` + OperatorToken + `"}
`

// Tokens is the real token table (internal/auth) over the test tokens.
func Tokens(tb testing.TB) *auth.Table {
	tb.Helper()
	tab, err := auth.Parse([]byte(tokensFile))
	if err != nil {
		tb.Fatalf("servertest: parse the test tokens: %v", err)
	}
	return tab
}

// NewID returns a fresh random 32-byte connection id.
func NewID() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return b
}

// Bearer returns a transport over base (nil: http.DefaultTransport) that
// sends tok as a bearer token on every request, unary and streaming.
func Bearer(base http.RoundTripper, tok string) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return bearer{base: base, tok: tok}
}

type bearer struct {
	base http.RoundTripper
	tok  string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.base.RoundTrip(r)
}

// FastPolicy runs the breaker in milliseconds, without jitter so that
// durations are exact: a trip after 3 consecutive failures (or half of at
// least 4 calls in a second), opens of 100 ms doubling to 1.6 s, short
// cooldowns for every class, one probe on a 300 ms lease.
func FastPolicy() breaker.Policy {
	return breaker.Policy{
		ConsecutiveFailures: 3, FailureRate: 0.5, MinCalls: 4, Window: time.Second,
		OpenBase: 100 * time.Millisecond, OpenMax: 1600 * time.Millisecond, Jitter: 0,
		RateLimitCooldown: 50 * time.Millisecond, OverloadFloor: 200 * time.Millisecond,
		QuotaBlock: 1500 * time.Millisecond, AuthBlock: time.Second, MaxProbes: 1, LeaseTTL: 300 * time.Millisecond,
	}
}

// Silent returns the address of a loopback listener that accepts
// connections and never answers (a Redis or a peer that hangs); the
// listener and its connections close at cleanup.
func Silent(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("servertest: listen: %v", err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}
