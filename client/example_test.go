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
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// startCooldownd runs cooldownd in-process on an embedded Redis, as
// `go run ./cmd/cooldownd` does, and returns its URL.
func startCooldownd() (url string, stop func(), err error) {
	s, err := servertest.Run()
	if err != nil {
		return "", nil, err
	}
	return s.URL, s.Close, nil
}

// fakeProvider answers with the given statuses in turn, then 200, and
// counts its calls.
func fakeProvider(name string, calls *atomic.Int64, statuses ...int) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(calls.Add(1))
		if n <= len(statuses) {
			w.WriteHeader(statuses[n-1])
			_, _ = io.WriteString(w, `{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"answer":"hello from `+name+`"}`)
	}))
}

// Do guards one provider call: admit, call, classify, report, retry.
func ExampleClient_Do() {
	url, stop, err := startCooldownd()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	var calls atomic.Int64
	openai := fakeProvider("openai", &calls, http.StatusServiceUnavailable) // fails once
	defer openai.Close()

	c, err := client.New(url, client.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		client.WithAdmitTimeout(5*time.Second)) // generous: the example's cooldownd shares a busy machine
	if err != nil {
		fmt.Println(err)
		return
	}
	const apiKey = "sk-example" // hashed into the connection id, never sent to cooldownd
	conn, err := c.Connection("openai", openai.URL, apiKey, "gpt-4o", "")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := c.Do(context.Background(), conn, func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, openai.URL+"/chat/completions",
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
	fmt.Println("provider calls:", calls.Load())
	// Output:
	// 200 {"answer":"hello from openai"}
	// provider calls: 2
}

// DoFallback moves on to the next candidate at once when the primary's
// quota is exhausted, and cooldownd skips the primary from then on, in every
// process.
func ExampleClient_DoFallback() {
	url, stop, err := startCooldownd()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	var primaryCalls, fallbackCalls atomic.Int64
	primary := fakeProvider("openai", &primaryCalls, http.StatusTooManyRequests) // insufficient_quota
	defer primary.Close()
	fallback := fakeProvider("anthropic", &fallbackCalls)
	defer fallback.Close()

	c, err := client.New(url, client.WithAdmitTimeout(5*time.Second)) // generous: a busy machine
	if err != nil {
		fmt.Println(err)
		return
	}
	gpt, err := c.Connection("openai", primary.URL, "sk-example", "gpt-4o", "")
	if err != nil {
		fmt.Println(err)
		return
	}
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
	fmt.Println("primary calls:", primaryCalls.Load(), "fallback calls:", fallbackCalls.Load())
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
	url, stop, err := startCooldownd()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	var calls atomic.Int64
	provider := fakeProvider("openai", &calls, http.StatusBadGateway) // fails once
	defer provider.Close()

	c, err := client.New(url, client.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		client.WithAdmitTimeout(5*time.Second)) // generous: the example's cooldownd shares a busy machine
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, err := c.Connection("openai", provider.URL, "sk-example", "gpt-4o", "")
	if err != nil {
		fmt.Println(err)
		return
	}
	hc := &http.Client{Transport: c.RoundTripper(conn, nil)}
	resp, err := hc.Post(provider.URL+"/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	fmt.Println(resp.Status, "after", calls.Load(), "calls")
	// Output:
	// 200 OK after 2 calls
}
