package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quickstartMarker is the docsnippets marker of README.md's first program
// (the block is examples/quickstart/main.go, word for word).
const quickstartMarker = "<!-- snippet: in examples/quickstart/main.go -->"

// openaiGo is the openai-go the consumer gets: the root module's.
const openaiGo = "github.com/openai/openai-go/v3@v3.98.0"

// quickstart returns README.md's first go block of "Using the client": the
// program it tells a reader to save as main.go.
func quickstart(t *testing.T, root string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	text := string(readme)
	using := strings.Index(text, "## Using the client")
	require.GreaterOrEqual(t, using, 0, "README.md has no Using the client section")
	m := regexp.MustCompile("(?s)" + regexp.QuoteMeta(quickstartMarker) + "\n```go\n(.*?)```").FindStringSubmatchIndex(text)
	require.NotNil(t, m, "README.md has no go block after %s", quickstartMarker)
	require.Greater(t, m[0], using, "the example is in Using the client")
	next := regexp.MustCompile("(?m)^```go$").FindStringIndex(text[using:])
	require.NotNil(t, next)
	assert.Equal(t, using+next[0], m[0]+len(quickstartMarker)+1, "the example is the section's first go block")
	install := strings.Index(text, "<!-- install: go -->")
	require.True(t, install > using && install < m[0], "the example follows the install block")
	return text[m[2]:m[3]]
}

// fakeOpenAI is an OpenAI-compatible provider on loopback that answers its
// first chat completion with a 429 (Retry-After: 0) and the others with a
// completion.
type fakeOpenAI struct {
	*httptest.Server
	mu    sync.Mutex
	calls []string // the method and path of each request
	keys  []string // the bearer of each request
}

func newFakeOpenAI(t *testing.T) *fakeOpenAI {
	t.Helper()
	f := &fakeOpenAI{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		f.mu.Lock()
		f.calls = append(f.calls, r.Method+" "+r.URL.Path)
		f.keys = append(f.keys, r.Header.Get("Authorization"))
		n := len(f.calls)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached.","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-5.5",`+
			`"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Hello from the fake provider."}}]}`)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeOpenAI) seen() ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), append([]string(nil), f.keys...)
}

// buildCooldownd builds ./cmd/cooldownd of root into a temporary directory
// in the background; wait returns its path.
func buildCooldownd(t *testing.T, root string) (wait func() string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cooldownd")
	done := make(chan error, 1)
	var out []byte
	go func() {
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/cooldownd")
		cmd.Dir = root
		var err error
		out, err = cmd.CombinedOutput()
		done <- err
	}()
	result := sync.OnceValue(func() error { return <-done })
	t.Cleanup(func() { _ = result() }) // before the directory is removed
	return func() string {
		t.Helper()
		require.NoError(t, result(), "go build ./cmd/cooldownd:\n%s", out)
		return bin
	}
}

// startCooldownd runs the cooldownd binary bin with its defaults (the
// embedded Redis, the documented policy) on a free loopback port, until
// the test ends. It returns the base URL.
func startCooldownd(t *testing.T, bin string) string {
	t.Helper()
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--log-format", "json")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	addr := make(chan string, 1)
	var logs strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			var rec struct {
				Msg, Addr string
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "cooldownd serving" && rec.Addr != "" {
				select {
				case addr <- rec.Addr:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	select {
	case a := <-addr:
		return "http://" + a
	case <-exited:
	case <-time.After(time.Minute):
	}
	logMu.Lock()
	defer logMu.Unlock()
	t.Fatalf("cooldownd did not serve:\n%s", logs.String())
	return ""
}

// reportsTotal is cooldownd's count of reports of outcome, from /metrics.
func reportsTotal(t *testing.T, base, outcome string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^cooldownd_reports_total\{[^}]*outcome="` + outcome + `"[^}]*\} (\d+)$`)
	total := 0
	for _, m := range line.FindAllStringSubmatch(string(body), -1) {
		var n int
		_, err := fmt.Sscan(m[1], &n)
		require.NoError(t, err)
		total += n
	}
	return total
}

// TestQuickstartRunsAsPasted: README.md's first program, pasted as main.go
// into a fresh module made with the README's install block (and the SDK it
// names), builds and runs against a real cooldownd and a fake OpenAI on
// loopback, reading both from the environment as the README says. The
// provider's 429 is retried by the guard (the SDK's retries are off: two
// requests in all), the program prints the answer, and cooldownd heard
// both outcomes.
func TestQuickstartRunsAsPasted(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	src := quickstart(t, root)
	example, err := os.ReadFile(filepath.Join(root, "examples", "quickstart", "main.go"))
	require.NoError(t, err)
	require.Contains(t, string(example), src, "examples/quickstart/main.go holds the README's program")

	cooldownd := buildCooldownd(t, root) // while the consumer is made
	dir := newConsumer(t, root, src, []string{"get", openaiGo})
	bin := filepath.Join(t.TempDir(), "quickstart")
	goCmd(t, dir, "build", "-o", bin, ".")

	cd := startCooldownd(t, cooldownd())
	prov := newFakeOpenAI(t)
	const key = "sk-quickstart-test-0000000000000000"
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = dir
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "COOLDOWND_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "COOLDOWND_URL="+cd, "OPENAI_BASE_URL="+prov.URL, "OPENAI_API_KEY="+key)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "the README's program failed:\n%s", stderr.String())
	assert.Equal(t, "Hello from the fake provider.\n", string(out))

	calls, keys := prov.seen()
	assert.Equal(t, []string{"POST /chat/completions", "POST /chat/completions"}, calls, "a 429, then the guard's retry")
	assert.Equal(t, []string{"Bearer " + key, "Bearer " + key}, keys, "openai-go read OPENAI_API_KEY")
	assert.Equal(t, 1, reportsTotal(t, cd, "rate_limited"), "cooldownd heard the 429")
	assert.Equal(t, 1, reportsTotal(t, cd, "success"), "cooldownd heard the success")
}
