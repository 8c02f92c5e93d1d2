package client

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// newHTTPClient returns the default HTTP client for cooldownd: HTTP/2 over
// TLS (ALPN, with HTTP/1.1 fallback) for https, h2c with prior knowledge
// for http, falling back to HTTP/1.1 when the server turns out to speak only
// that. Per-call deadlines come from contexts (see [WithAdmitTimeout]), so
// the client itself has no overall timeout. Proxies from the environment
// apply to https only: h2c cannot pass through an HTTP proxy.
func newHTTPClient(scheme string) *http.Client {
	base := func(p *http.Protocols) *http.Transport {
		t := &http.Transport{
			DialContext: (&net.Dialer{
				Timeout:   5 * time.Second,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			Protocols:             p,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ExpectContinueTimeout: time.Second,
			// Ping an idle HTTP/2 connection so that a dead peer is noticed
			// before a call waits on it.
			HTTP2: &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 5 * time.Second},
		}
		if scheme == "https" {
			t.Proxy = http.ProxyFromEnvironment
		}
		return t
	}
	if scheme == "https" {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		return &http.Client{Transport: base(&p)}
	}
	var h2c, h1 http.Protocols
	h2c.SetUnencryptedHTTP2(true) // without HTTP1: prior knowledge
	h1.SetHTTP1(true)
	return &http.Client{Transport: &h2cFallback{h2c: base(&h2c), h1: base(&h1)}}
}

// h2cFallback sends over h2c with prior knowledge. Until h2c has worked
// once, a failure that an HTTP/1.1-only server causes (it answers the
// HTTP/2 preface in HTTP/1.1 and hangs up) sends the request again over
// HTTP/1.1, and when that gets a response, HTTP/1.1 is used from then on.
type h2cFallback struct {
	h2c, h1 *http.Transport
	h2ok    atomic.Bool // h2c got a response once
	useH1   atomic.Bool
}

// RoundTrip implements [http.RoundTripper].
func (t *h2cFallback) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.useH1.Load() {
		return t.h1.RoundTrip(req)
	}
	resp, err := t.h2c.RoundTrip(req)
	if err == nil {
		t.h2ok.Store(true)
		return resp, nil
	}
	if t.h2ok.Load() || !refusedPreface(err) {
		return nil, err
	}
	// The server did not speak HTTP/2, so it never read the request:
	// sending it again over HTTP/1.1 is safe.
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, err
		}
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = body
	}
	resp, err1 := t.h1.RoundTrip(req)
	if err1 != nil {
		return nil, err
	}
	t.useH1.Store(true)
	return resp, nil
}

// CloseIdleConnections closes both transports' idle connections.
func (t *h2cFallback) CloseIdleConnections() {
	t.h2c.CloseIdleConnections()
	t.h1.CloseIdleConnections()
}

// refusedPreface reports whether an h2c error is one that only an
// HTTP/1.1 server causes: the HTTP/2 client read an HTTP/1.1 answer ("… the
// frame header looked like an HTTP/1.1 header") or the connection failed
// before the HTTP/2 settings exchange. A reset or broken pipe is not such a
// sign — a restarting replica or a load balancer causes those too, and the
// server may have read the request — so they neither replay the request nor
// switch the client to HTTP/1.1. The standard library exposes no types for
// these two errors, only messages.
func refusedPreface(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "looked like an HTTP/1.1 header") ||
		strings.Contains(msg, "client conn could not be established")
}
