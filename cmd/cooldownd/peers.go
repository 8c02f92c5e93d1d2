package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/cooldownd/cooldownd/internal/server"
)

// peerOptions are the routing flags' (decision 0064): the shared token,
// and the client the replicas call one another with (https, verified by
// --coalesce-peer-ca-file or the system roots, when they serve TLS).
func peerOptions(cfg config) (server.PeerOptions, error) {
	b, err := os.ReadFile(cfg.peerTokenFile)
	if err != nil {
		return server.PeerOptions{}, fmt.Errorf("read --coalesce-peer-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
		return server.PeerOptions{}, fmt.Errorf("--coalesce-peer-token-file %s must hold one token of at least 16 characters", cfg.peerTokenFile)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}
	o := server.PeerOptions{Address: cfg.peerAddress, Token: tok, Client: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
	if cfg.tlsCertFile != "" {
		o.TLS = true
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.peerCAFile != "" {
			pem, err := os.ReadFile(cfg.peerCAFile)
			if err != nil {
				return server.PeerOptions{}, fmt.Errorf("read --coalesce-peer-ca-file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return server.PeerOptions{}, fmt.Errorf("--coalesce-peer-ca-file %s holds no PEM certificate", cfg.peerCAFile)
			}
		}
		tr.TLSClientConfig = tc
		tr.ForceAttemptHTTP2 = true
	}
	return o, nil
}
