package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cooldownd/cooldownd/internal/breaker"
)

// The client's tests run against the real cooldownd as a process: the
// binary of ../cmd/cooldownd (built once per test binary) on its embedded
// Redis. The client module imports nothing of the server, so that a
// consumer's module graph holds only what the client needs (decision 0040);
// a process boundary keeps the tests real without that import.

// buildDir holds the built binary; TestMain removes it.
var buildDir string

var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "cooldownd-client-test-")
	if err != nil {
		return "", err
	}
	buildDir = dir
	bin := filepath.Join(dir, "cooldownd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/cooldownd")
	cmd.Dir = ".." // the repository's root module, which holds the server
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build cooldownd: %w\n%s", err, out)
	}
	return bin, nil
})

// interceptor may answer a request itself (true) before cooldownd sees it.
type interceptor func(w http.ResponseWriter, r *http.Request) bool

// process is one running cooldownd.
type process struct {
	cmd  *exec.Cmd
	url  string // http://127.0.0.1:port
	out  syncBuffer
	done chan struct{}
}

// startProcess runs cooldownd with args after the defaults (loopback, a
// free port, JSON logs) and waits until it serves. It is killed at cleanup.
func startProcess(t testing.TB, args ...string) *process {
	t.Helper()
	p, err := runProcess(args...)
	if err != nil {
		t.Fatalf("start cooldownd: %v", err)
	}
	t.Cleanup(func() {
		p.kill()
		if strings.Contains(p.out.String(), "panic") {
			t.Errorf("cooldownd panicked:\n%s", p.out.String())
		}
	})
	return p
}

func runProcess(args ...string) (*process, error) {
	bin, err := buildOnce()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p := &process{done: make(chan struct{})}
	// A generous --redis-timeout, as the in-process server had none: on a
	// loaded machine the embedded Redis's round trip can pass the 200 ms
	// default and answer unavailable, which the tests would read as an
	// outage. A test that wants a short one passes it (the last flag wins).
	p.cmd = exec.Command(bin, append([]string{"--addr", "127.0.0.1:0", "--log-format", "json", "--redis-timeout", "10s"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	p.cmd.SysProcAttr = procAttr()
	err = p.cmd.Start()
	_ = pw.Close()
	if err != nil {
		_ = pr.Close()
		return nil, err
	}
	addr := make(chan string, 1)
	go p.read(pr, addr)
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	select {
	case a := <-addr:
		p.url = "http://" + a
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("cooldownd exited: %s", p.out.String())
	case <-time.After(30 * time.Second):
		p.kill()
		return nil, fmt.Errorf("cooldownd did not serve within 30s: %s", p.out.String())
	}
}

// read keeps the process's output and sends the address of its serving
// line; it ends when the process does.
func (p *process) read(r io.ReadCloser, addr chan<- string) {
	defer func() { _ = r.Close() }()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = p.out.Write(append(line, '\n'))
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "cooldownd serving" && rec.Addr != "" {
			select {
			case addr <- rec.Addr:
			default:
			}
		}
	}
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// cooldownd is a replica of a real cooldownd: a front in this process,
// on a loopback port of its own, in front of a cooldownd [process]. The
// front counts, records (every request's line, headers and body) and
// intercepts requests, and can take its address away ([cooldownd.Stop]:
// streams cut, as by a crash) and serve it again ([cooldownd.Restart]).
// Fronts of one process are replicas sharing one store ([cooldownd.replica]).
type cooldownd struct {
	URL  string // "http://127.0.0.1:port"
	Addr string // stays the same across Restart

	proc      *process
	proxy     *httputil.ReverseProxy
	calls     atomic.Int64
	intercept atomic.Pointer[interceptor]
	errLog    syncBuffer
	wireMu    sync.Mutex
	wire      bytes.Buffer

	mu   sync.Mutex
	http *httptest.Server
}

// startCooldownd starts a cooldownd with policy p, killed at cleanup.
func startCooldownd(t testing.TB, p breaker.Policy, args ...string) *cooldownd {
	t.Helper()
	return newFront(t, startProcess(t, append(policyArgs(p), args...)...))
}

// startCooldowndAuth starts a cooldownd that accepts the tokens ts, each
// a client of the default tenant.
func startCooldowndAuth(t testing.TB, p breaker.Policy, ts tokens) *cooldownd {
	t.Helper()
	return startCooldownd(t, p, "--tokens-file", ts.file(t))
}

// replica is a second cooldownd replica on the same store.
func (cd *cooldownd) replica(t testing.TB) *cooldownd {
	t.Helper()
	return newFront(t, cd.proc)
}

// policyArgs are the flags that set every knob of p.
func policyArgs(p breaker.Policy) []string {
	var args []string
	for _, k := range breaker.Knobs() {
		args = append(args, k.Flag()+"="+k.String(k.Get(p)))
	}
	return args
}

// tokens is a set of bearer tokens cooldownd accepts.
type tokens map[string]bool

// file writes ts as a tokens file (their SHA-256) and returns its path.
func (ts tokens) file(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("tokens:\n")
	i := 0
	for tok, ok := range ts {
		if !ok {
			continue
		}
		sum := sha256.Sum256([]byte(tok))
		fmt.Fprintf(&b, "  - name: test-%d\n    tenant: default\n    role: client\n    sha256: %s\n", i, hex.EncodeToString(sum[:]))
		i++
	}
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatalf("write tokens: %v", err)
	}
	return path
}

func newFront(t testing.TB, p *process) *cooldownd {
	t.Helper()
	cd, err := front(p)
	if err != nil {
		t.Fatalf("front: %v", err)
	}
	t.Cleanup(func() {
		cd.Stop()
		if l := cd.errLog.String(); strings.Contains(l, "panic") {
			t.Errorf("the front's handler panicked:\n%s", l)
		}
	})
	return cd
}

func front(p *process) (*cooldownd, error) {
	target, err := url.Parse(p.url)
	if err != nil {
		return nil, err
	}
	var up http.Protocols
	up.SetUnencryptedHTTP2(true) // gRPC needs HTTP/2 (trailers); Connect takes it too
	cd := &cooldownd{proc: p}
	cd.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		Transport:     &http.Transport{Protocols: &up, ForceAttemptHTTP2: true},
		FlushInterval: -1, // a watch stream's messages pass at once
		ErrorLog:      log.New(&cd.errLog, "", 0),
	}
	if err := cd.serve(nil); err != nil {
		return nil, err
	}
	return cd, nil
}

// serve starts the front on l (nil: a new loopback port).
func (cd *cooldownd) serve(l net.Listener) error {
	hs := httptest.NewUnstartedServer(http.HandlerFunc(cd.handle))
	if l != nil {
		_ = hs.Listener.Close()
		hs.Listener = l
	}
	hs.Config.ErrorLog = log.New(&cd.errLog, "", 0)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	hs.Config.Protocols = &p
	hs.Start()
	cd.mu.Lock()
	cd.http = hs
	cd.URL, cd.Addr = hs.URL, hs.Listener.Addr().String()
	cd.mu.Unlock()
	return nil
}

// handle counts, records and intercepts a request, then passes it on.
func (cd *cooldownd) handle(w http.ResponseWriter, r *http.Request) {
	cd.record(r)
	cd.calls.Add(1)
	if f := cd.intercept.Load(); f != nil && (*f)(w, r) {
		return
	}
	cd.proxy.ServeHTTP(w, r)
}

// record appends r's request line, headers and body, as received, to the
// wire, and leaves the body to be read again.
func (cd *cooldownd) record(r *http.Request) {
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	cd.wireMu.Lock()
	defer cd.wireMu.Unlock()
	fmt.Fprintf(&cd.wire, "%s %s %s\r\nHost: %s\r\n", r.Method, r.URL.RequestURI(), r.Proto, r.Host)
	_ = r.Header.Write(&cd.wire)
	cd.wire.WriteString("\r\n")
	cd.wire.Write(body)
	if err != nil {
		fmt.Fprintf(&cd.wire, "\r\n(body cut: %v)", err)
	}
	cd.wire.WriteString("\r\n")
}

// SetIntercept sets (nil: clears) the request interceptor.
func (cd *cooldownd) SetIntercept(f interceptor) {
	if f == nil {
		cd.intercept.Store(nil)
		return
	}
	cd.intercept.Store(&f)
}

// Calls is how many requests reached the front (intercepted ones too).
func (cd *cooldownd) Calls() int64 { return cd.calls.Load() }

// Wire returns every request received so far.
func (cd *cooldownd) Wire() []byte {
	cd.wireMu.Lock()
	defer cd.wireMu.Unlock()
	return bytes.Clone(cd.wire.Bytes())
}

// Stop takes the address away: open connections and watch streams are
// cut, as by a crash, and the listener closes. The process (the store)
// stays.
func (cd *cooldownd) Stop() {
	cd.mu.Lock()
	hs := cd.http
	cd.http = nil
	cd.mu.Unlock()
	if hs == nil {
		return
	}
	hs.CloseClientConnections() // first: open streams are cut
	hs.Close()
}

// Restart serves again on the same address, waiting (up to 5 s) for the
// old socket to let go.
func (cd *cooldownd) Restart(ctx context.Context) error {
	cd.Stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		l, err := net.Listen("tcp", cd.Addr)
		if err == nil {
			return cd.serve(l)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("listen on %s again: %w", cd.Addr, errors.Join(err, ctx.Err()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// syncBuffer is a goroutine-safe bytes.Buffer for logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// RunCooldowndForExample runs a cooldownd for the package's examples (which
// cannot use testing.TB); stop kills it.
func RunCooldowndForExample() (url string, stop func(), err error) {
	p, err := runProcess()
	if err != nil {
		return "", nil, err
	}
	return p.url, p.kill, nil
}
