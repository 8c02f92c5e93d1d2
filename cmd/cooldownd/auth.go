package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cooldownd/cooldownd/internal/auth"
)

// errNeedAuth is why cooldownd refuses to serve openly on the network.
var errNeedAuth = errors.New("refusing to serve without authentication on a non-loopback address: give --tokens-file, or --insecure-no-auth to accept the risk")

// isLoopback reports whether a listen address only accepts local peers.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// openAuth loads the tokens file and reloads it on change and on SIGHUP.
// It returns nil (no auth) only when that is allowed.
func openAuth(ctx context.Context, cfg config, log *slog.Logger) (*auth.Watcher, error) {
	if cfg.tokensFile == "" {
		switch {
		case cfg.insecureNoAuth:
			log.Warn("AUTHENTICATION IS OFF (--insecure-no-auth): anyone who reaches this port is admin of the default tenant")
		case !isLoopback(cfg.addr):
			return nil, errNeedAuth
		default:
			log.Warn("no --tokens-file: authentication is off; serving on loopback only")
		}
		return nil, nil
	}
	w, err := auth.NewWatcher(cfg.tokensFile, log)
	if err != nil {
		return nil, err
	}
	go w.Run(ctx, cfg.tokensReload)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				w.ReloadNow(ctx)
			}
		}
	}()
	return w, nil
}

// certReloader serves the TLS certificate and reloads it when its files
// change, so a renewed certificate needs no restart.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	mu                sync.RWMutex
	cert              *tls.Certificate
	stamp             string
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	c := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certReloader) fileStamp() string {
	var s string
	for _, f := range []string{c.certFile, c.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return s
}

func (c *certReloader) reload() error {
	stamp := c.fileStamp()
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("load TLS certificate: %w", err)
	}
	c.mu.Lock()
	c.cert, c.stamp = &cert, stamp
	c.mu.Unlock()
	return nil
}

func (c *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, nil
}

func (c *certReloader) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.mu.RLock()
			same := c.stamp == c.fileStamp()
			c.mu.RUnlock()
			if same {
				continue
			}
			if err := c.reload(); err != nil {
				c.log.Error("TLS certificate not reloaded; keeping the previous one", "err", err)
				continue
			}
			c.log.Info("TLS certificate reloaded")
		}
	}
}
