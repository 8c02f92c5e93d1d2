package server

import (
	"log"
	"net/http"
	"time"
)

// HTTPOptions configure [NewHTTPServer].
type HTTPOptions struct {
	// ReadHeaderTimeout bounds reading a request's headers (zero: none).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long (zero:
	// 2 minutes).
	IdleTimeout time.Duration
	// ErrorLog receives net/http's own errors (nil: the log package's).
	ErrorLog *log.Logger
}

// NewHTTPServer returns the http.Server cmd/cooldownd serves h with on
// plain TCP: HTTP/1.1 and unencrypted HTTP/2 (h2c, prior knowledge) on one
// port, 64 KiB of headers at most. A TLS listener adds HTTP/2 over TLS
// (Protocols.SetHTTP2). The benchmarks of the RPC path
// (internal/server/bench_test.go) serve through the same settings.
func NewHTTPServer(h http.Handler, o HTTPOptions) *http.Server {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	idle := o.IdleTimeout
	if idle == 0 {
		idle = 2 * time.Minute
	}
	return &http.Server{
		Handler:           h,
		Protocols:         protocols,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          o.ErrorLog,
	}
}
