package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/cooldownd/cooldownd/internal/server"
)

// peerOptions are the routing flags' (decision 0064): the shared token,
// and the client the replicas call one another with (https, verified by
// --coalesce-peer-ca-file or the system roots, when they serve TLS).
func peerOptions(cfg config) (server.PeerOptions, error) {
	tok, err := readTokenFile("--coalesce-peer-token-file", cfg.peerTokenFile)
	if err != nil {
		return server.PeerOptions{}, err
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
