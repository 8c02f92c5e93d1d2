package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

func withToken(tok string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+tok)
			return next(ctx, req)
		}
	}))
}

func admitOnce(t *testing.T, c cooldownv1connect.CooldownServiceClient) error {
	t.Helper()
	_, err := c.Admit(t.Context(), connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: newID(3)}}}))
	return err
}

// TestTokensFileRotation: tokens are required, and a rotated file takes
// effect without a restart.
func TestTokensFileRotation(t *testing.T) {
	t.Parallel()
	const oldTok, newTok = "old-token-0123456789abcdef", "new-token-0123456789abcdef"
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	write := func(tok string) {
		require.NoError(t, os.WriteFile(path, []byte("tokens:\n  - {name: app, tenant: team-a, role: client, token: "+tok+"}\n"), 0o600))
	}
	write(oldTok)
	in := start(t, "--addr", "127.0.0.1:0", "--tokens-file", path, "--tokens-reload-interval", "100ms")
	anon := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url())
	assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(admitOnce(t, anon)))
	require.NoError(t, admitOnce(t, cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url(), withToken(oldTok))))

	write(newTok)
	newClient := cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url(), withToken(newTok))
	deadline := time.Now().Add(5 * time.Second)
	for admitOnce(t, newClient) != nil {
		require.True(t, time.Now().Before(deadline), "the rotated token was not accepted within 5s")
		time.Sleep(50 * time.Millisecond)
	}
	err := admitOnce(t, cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, in.url(), withToken(oldTok)))
	assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "the old token is revoked")
	assert.NotContains(t, in.logs.String(), oldTok)
	assert.NotContains(t, in.logs.String(), newTok)
	assert.Contains(t, in.logs.String(), "tokens reloaded")
}

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cooldownd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServeTLS: with a certificate, the API is served over TLS with HTTP/2
// (so gRPC works too), and plain HTTP is refused.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	in := start(t, "--addr", "127.0.0.1:0", "--tls-cert-file", certFile, "--tls-key-file", keyFile)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	base := "https://" + in.addr
	require.NoError(t, admitOnce(t, cooldownv1connect.NewCooldownServiceClient(hc, base)))
	require.NoError(t, admitOnce(t, cooldownv1connect.NewCooldownServiceClient(hc, base, connect.WithGRPC())), "gRPC needs HTTP/2 over TLS")
	res, err := hc.Get(base + "/livez")
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, 2, res.ProtoMajor, "HTTP/2 is negotiated")
	err = admitOnce(t, cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, "http://"+in.addr))
	assert.Error(t, err, "plain HTTP is not served on a TLS port")
}

// TestRefusesContradictoryAuthFlags: --insecure-no-auth with a tokens file
// is a configuration error.
func TestRefusesContradictoryAuthFlags(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"--tokens-file", "x", "--insecure-no-auth"}, envOf(nil), io.Discard, new(syncBuffer), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--insecure-no-auth contradicts --tokens-file")
}
