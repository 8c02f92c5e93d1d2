package main

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy modes.
const (
	proxyPass      int32 = iota
	proxyLatency         // every chunk waits proxyDelay each way
	proxyReset           // every connection is reset (SO_LINGER 0), new ones at once
	proxyBlackhole       // bytes are swallowed, nothing answers
)

const proxyDelay = 300 * time.Millisecond

// proxy is a TCP proxy on loopback between the replicas and Redis that
// adds latency, resets connections or blackholes them, switched at run
// time.
type proxy struct {
	l      net.Listener
	target string
	mode   atomic.Int32

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startProxy(target string) (*proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *proxy) addr() string { return p.l.Addr().String() }

// set switches the mode; a reset also resets every open connection.
func (p *proxy) set(mode int32) {
	p.mode.Store(mode)
	if mode != proxyReset {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

func (p *proxy) close() {
	_ = p.l.Close()
	p.set(proxyReset)
	p.wg.Wait()
}

func (p *proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if p.mode.Load() == proxyReset {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *proxy) serve(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.track(c, true)
	p.track(up, true)
	defer func() {
		p.track(c, false)
		p.track(up, false)
		_, _ = c.Close(), up.Close()
	}()
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(up, c); _ = up.Close() })
	p.pipe(c, up)
	_ = c.Close()
	wg.Wait()
}

// pipe copies src to dst, chunk by chunk, as the mode says.
func (p *proxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			switch p.mode.Load() {
			case proxyLatency:
				time.Sleep(proxyDelay)
			case proxyBlackhole:
				continue // swallowed
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
