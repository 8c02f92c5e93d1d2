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
// the client itself has no overall timeout.
func newHTTPClient(scheme string) *http.Client {
	base := func(p *http.Protocols) *http.Transport {
		return &http.Transport{
			Proxy: http.ProxyFromEnvironment,
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

// h2cFallback sends over h2c until a server answers the HTTP/2 preface
// with HTTP/1.1; from then on it sends over HTTP/1.1.
type h2cFallback struct {
	h2c, h1 *http.Transport
	useH1   atomic.Bool
}

// RoundTrip implements [http.RoundTripper].
func (t *h2cFallback) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.useH1.Load() {
		return t.h1.RoundTrip(req)
	}
	resp, err := t.h2c.RoundTrip(req)
	if err == nil || !spokeHTTP1(err) || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
		return resp, err
	}
	// The server rejected the preface before reading the request, so
	// sending it again is safe.
	t.useH1.Store(true)
	if req.GetBody != nil {
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = body
	}
	return t.h1.RoundTrip(req)
}

// CloseIdleConnections closes both transports' idle connections.
func (t *h2cFallback) CloseIdleConnections() {
	t.h2c.CloseIdleConnections()
	t.h1.CloseIdleConnections()
}

// spokeHTTP1 reports whether an HTTP/2 client error says that the server
// answered in HTTP/1.1. The standard library exposes no type for it, only
// this message ("… note that the frame header looked like an HTTP/1.1
// header").
func spokeHTTP1(err error) bool {
	return strings.Contains(err.Error(), "looked like an HTTP/1.1 header")
}
