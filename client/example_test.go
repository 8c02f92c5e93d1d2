package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cooldownd/cooldownd/client"
)

// example is what each example runs against: cooldownd in-process on an
// embedded Redis (as `go run ./cmd/cooldownd` runs it), a fake OpenAI, and
// a client guarding one connection to it.
type example struct {
	provider *httptest.Server // the fake OpenAI
	calls    *atomic.Int64    // the provider's calls
	client   *client.Client
	conn     client.Conn // "openai" on provider, API key apiKey
	closers  []func()
}

// apiKey is the examples' provider key: hashed into the connection id,
// never sent to cooldownd.
const apiKey = "sk-example"

// startExample starts an example whose provider answers with statuses in
// turn, then 200. On an error it prints it and returns nil.
func startExample(statuses ...int) *example {
	url, stop, err := client.RunCooldowndForExample()
	if err != nil {
		fmt.Println(err)
		return nil
	}
	e := &example{closers: []func(){stop}}
	e.provider, e.calls = e.fakeProvider("openai", statuses...)
	e.client, err = client.New(url, client.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		client.WithAdmitTimeout(5*time.Second)) // generous: the example's cooldownd shares a busy machine
	if err == nil {
		e.closers = append(e.closers, func() { _ = e.client.Close() })
		e.conn, err = e.client.Connection("openai", e.provider.URL, apiKey, "gpt-4o", "")
	}
	if err != nil {
		fmt.Println(err)
		e.close()
		return nil
	}
	return e
}

// close closes what the example started, the last first.
func (e *example) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// fakeProvider starts a provider that answers with the given statuses in
// turn, then 200, and counts its calls; e.close closes it.
func (e *example) fakeProvider(name string, statuses ...int) (*httptest.Server, *atomic.Int64) {
	calls := new(atomic.Int64)
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(calls.Add(1))
		if n <= len(statuses) {
			w.WriteHeader(statuses[n-1])
			_, _ = io.WriteString(w, `{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"answer":"hello from `+name+`"}`)
	}))
	e.closers = append(e.closers, p.Close)
	return p, calls
}

// Do guards one provider call: admit, call, classify, report, retry.
func ExampleClient_Do() {
	e := startExample(http.StatusServiceUnavailable) // the provider fails once
	if e == nil {
		return
	}
	defer e.close()
	resp, err := e.client.Do(context.Background(), e.conn, func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.provider.URL+"/chat/completions",
			strings.NewReader(`{"model":"gpt-4o"}`))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		return http.DefaultClient.Do(req)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("provider calls:", e.calls.Load())
	// Output:
	// 200 {"answer":"hello from openai"}
	// provider calls: 2
}

// DoFallback moves on to the next candidate at once when the primary's
// quota is exhausted, and cooldownd skips the primary from then on, in every
// process.
func ExampleClient_DoFallback() {
	e := startExample(http.StatusTooManyRequests) // insufficient_quota
	if e == nil {
		return
	}
	defer e.close()
	c, gpt, primary := e.client, e.conn, e.provider
	fallback, fallbackCalls := e.fakeProvider("anthropic")
	claude, err := c.Connection("anthropic", fallback.URL, "sk-ant-example", "claude-sonnet", "")
	if err != nil {
		fmt.Println(err)
		return
	}
	urls := map[client.Conn]string{gpt: primary.URL, claude: fallback.URL}
	for range 2 {
		resp, err := c.DoFallback(context.Background(), []client.Conn{gpt, claude},
			func(ctx context.Context, conn client.Conn) (*http.Response, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, urls[conn], strings.NewReader(`{}`))
				if err != nil {
					return nil, err
				}
				return http.DefaultClient.Do(req)
			})
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Println(string(body))
	}
	fmt.Println("primary calls:", e.calls.Load(), "fallback calls:", fallbackCalls.Load())
	// Output:
	// {"answer":"hello from anthropic"}
	// {"answer":"hello from anthropic"}
	// primary calls: 1 fallback calls: 2
}

// RoundTripper guards every request of an http.Client, so an SDK that
// takes one is guarded too. Turn the SDK's own retries off:
//
//	openai.NewClient(option.WithHTTPClient(hc), option.WithMaxRetries(0))
func ExampleClient_RoundTripper() {
	e := startExample(http.StatusBadGateway) // the provider fails once
	if e == nil {
		return
	}
	defer e.close()
	hc := &http.Client{Transport: e.client.RoundTripper(e.conn, nil)}
	resp, err := hc.Post(e.provider.URL+"/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	fmt.Println(resp.Status, "after", e.calls.Load(), "calls")
	// Output:
	// 200 OK after 2 calls
}

// AdmitAttempt drives retries by hand: each Admit names the connections
// the call was already sent to, so cooldownd charges a retry to the
// connection's fleet retry budget, and Report passes Admission.Retry on.
// A retry over the budget is denied with ReasonRetryBudget: fall back or
// give up then, do not wait.
func ExampleClient_AdmitAttempt() {
	e := startExample(http.StatusBadGateway)
	if e == nil {
		return
	}
	defer e.close()
	c, ctx := e.client, context.Background()
	var sent []client.Conn
	for attempt := 1; attempt <= 3; attempt++ {
		a, err := c.AdmitAttempt(ctx, client.Attempt{Candidates: []client.Conn{e.conn}, Sent: sent})
		if err != nil {
			fmt.Println(err)
			return
		}
		if !a.Allowed() {
			fmt.Println("denied:", a.Reason)
			return
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.provider.URL, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		var body []byte
		if err == nil && resp.StatusCode/100 != 2 {
			body, _ = client.ReadErrorBody(ctx, resp, 64<<10)
		}
		cl := client.Classify(client.DefaultRules(), resp, body, err, ctx.Err())
		if err := c.Report(ctx, a, cl); err != nil {
			fmt.Println(err)
		}
		if resp != nil {
			_ = resp.Body.Close()
		}
		fmt.Printf("attempt %d: retry %t, %s\n", attempt, a.Retry, cl.Outcome)
		if !cl.Retryable {
			return
		}
		sent = append(sent, a.Conn)
	}
	// Output:
	// attempt 1: retry false, transient_failure
	// attempt 2: retry true, success
}
