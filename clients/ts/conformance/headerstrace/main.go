// Command headerstrace classifies responses with the Go client
// (client.Classify and its header parsers) for the TypeScript client's
// differential test (clients/ts/test/headers.test.ts). It reads
//
//	{"now": RFC 3339, "cases": [{"status": int, "headers": [[name, base64 line], ...], "body": base64}]}
//
// on stdin, adds each header line's bytes as one line of an http.Header,
// and writes for each case the verdict and what each parser read, with
// durations in milliseconds rounded up (as the TypeScript client holds
// them) and -1 for "no value".
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"time"

	"github.com/cooldownd/cooldownd/client"
)

type input struct {
	Now   time.Time `json:"now"`
	Cases []struct {
		Status  int         `json:"status"`
		Headers [][2]string `json:"headers"`
		Body    string      `json:"body"`
	} `json:"cases"`
}

type result struct {
	Outcome       string `json:"outcome"`
	Retryable     bool   `json:"retryable"`
	RetryAfterMs  int64  `json:"retry_after_ms"`
	ErrorCode     string `json:"error_code"`
	ProactiveMs   int64  `json:"proactive_ms"`
	TooLong       bool   `json:"too_long"`
	ServerDelayMs int64  `json:"server_delay_ms"`
	ShouldRetry   int    `json:"should_retry"` // -1 none, 0 false, 1 true
	ProactiveOnly int64  `json:"proactive_only_ms"`
}

func ceilMs(d time.Duration) int64 { return int64(math.Ceil(float64(d) / float64(time.Millisecond))) }

func run() error {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return err
	}
	rules := client.DefaultRules()
	rules.Now = func() time.Time { return in.Now }
	out := make([]result, len(in.Cases))
	for i, c := range in.Cases {
		h := http.Header{}
		for _, kv := range c.Headers {
			line, err := base64.StdEncoding.DecodeString(kv[1])
			if err != nil {
				return fmt.Errorf("case %d: %w", i, err)
			}
			h.Add(kv[0], string(line))
		}
		body, err := base64.StdEncoding.DecodeString(c.Body)
		if err != nil {
			return fmt.Errorf("case %d: %w", i, err)
		}
		if len(body) == 0 {
			body = nil
		}
		cl := client.Classify(rules, &http.Response{StatusCode: c.Status, Header: h}, body, nil, nil)
		r := result{
			Outcome: cl.Outcome.String(), Retryable: cl.Retryable, RetryAfterMs: ceilMs(cl.RetryAfter),
			ErrorCode: cl.ErrorCode, ProactiveMs: ceilMs(cl.Proactive), TooLong: cl.TooLong,
			ServerDelayMs: -1, ShouldRetry: -1, ProactiveOnly: -1,
		}
		if d, ok := client.ServerDelay(h, in.Now); ok {
			r.ServerDelayMs = ceilMs(d)
		}
		if v, ok := client.ShouldRetryHeader(h); ok {
			r.ShouldRetry = 0
			if v {
				r.ShouldRetry = 1
			}
		}
		if d, ok := client.ProactiveDelay(h, in.Now); ok {
			r.ProactiveOnly = ceilMs(d)
		}
		out[i] = r
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "headerstrace:", err)
		os.Exit(1)
	}
}
