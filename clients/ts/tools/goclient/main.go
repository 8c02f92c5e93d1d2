// Command goclient is a Go client process for the TypeScript client's
// cross-language tests (clients/ts/test/e2e.test.ts): it derives a
// connection with the Go client (github.com/cooldownd/cooldownd/client)
// and runs the commands it reads from stdin, one JSON object a line,
// answering each with one JSON line on stdout:
//
//	{"op":"id"}                                  → {"id":"<hex>"}
//	{"op":"admit"}                               → the admission (kept for report)
//	{"op":"report","outcome":"rate_limited","retry_after_ms":3000}
//	{"op":"do","url":"http://127.0.0.1:1234/x"}  → a guarded GET through client.Do
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/cooldownd/cooldownd/client"
)

type command struct {
	Op           string `json:"op"`
	Outcome      string `json:"outcome"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	HTTPStatus   int    `json:"http_status"`
	URL          string `json:"url"`
}

var outcomes = map[string]client.Outcome{
	"success": client.OutcomeSuccess, "transient_failure": client.OutcomeTransientFailure,
	"rate_limited": client.OutcomeRateLimited, "overloaded": client.OutcomeOverloaded,
	"quota_exhausted": client.OutcomeQuotaExhausted, "auth_failure": client.OutcomeAuthFailure,
	"client_error": client.OutcomeClientError, "canceled": client.OutcomeCanceled,
}

func main() {
	var (
		server     = flag.String("server", "http://127.0.0.1:8080", "cooldownd URL(s)")
		provider   = flag.String("provider", "openai", "provider")
		endpoint   = flag.String("endpoint", "https://api.openai.com/v1", "provider endpoint")
		credential = flag.String("credential", "", "credential (read from $GOCLIENT_CREDENTIAL when empty)")
		scope      = flag.String("scope", "", "scope")
		saltHex    = flag.String("salt", "", "salt, hex")
		label      = flag.String("label", "", "label")
	)
	flag.Parse()
	if *credential == "" {
		*credential = os.Getenv("GOCLIENT_CREDENTIAL")
	}
	if err := run(*server, *provider, *endpoint, *credential, *scope, *saltHex, *label); err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

func run(server, provider, endpoint, credential, scope, saltHex, label string) error {
	salt, err := hex.DecodeString(saltHex)
	if err != nil {
		return err
	}
	c, err := client.New(server, client.WithSalt(salt), client.WithNoWait(), client.WithAdmitTimeout(2*time.Second),
		client.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	defer c.Close()
	conn, err := c.Connection(provider, endpoint, credential, scope, label)
	if err != nil {
		return err
	}
	ctx := context.Background()
	var last client.Admission
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var cmd command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			return err
		}
		answer := map[string]any{}
		switch cmd.Op {
		case "id":
			answer["id"] = conn.ID().String()
		case "admit":
			a, err := c.Admit(ctx, conn)
			if err != nil {
				answer["error"] = err.Error()
				break
			}
			last = a
			answer["decision"] = a.Decision.String()
			answer["reason"] = a.Reason.String()
			answer["retry_after_ms"] = a.RetryAfter.Milliseconds()
			answer["revision"] = fmt.Sprint(a.Revision)
			answer["lease"] = a.LeaseToken != ""
			answer["local"] = a.Local
		case "report":
			o, ok := outcomes[cmd.Outcome]
			if !ok {
				return fmt.Errorf("unknown outcome %q", cmd.Outcome)
			}
			err := c.Report(ctx, last, client.Classification{Outcome: o, HTTPStatus: cmd.HTTPStatus,
				RetryAfter: time.Duration(cmd.RetryAfterMs) * time.Millisecond})
			answer["ok"] = err == nil
			if err != nil {
				answer["error"] = err.Error()
			}
		case "do":
			resp, err := c.Do(ctx, conn, func(ctx context.Context) (*http.Response, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, cmd.URL, nil)
				if err != nil {
					return nil, err
				}
				return http.DefaultClient.Do(req)
			})
			var denied *client.DeniedError
			var failed *client.Error
			switch {
			case err == nil:
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				answer["status"] = resp.StatusCode
			case errors.As(err, &denied):
				answer["denied"] = denied.Reason.String()
				answer["retry_after_ms"] = denied.RetryAfter.Milliseconds()
			case errors.As(err, &failed):
				answer["failed"] = failed.LastOutcome.String()
				answer["attempts"] = failed.Attempts
				answer["status"] = failed.HTTPStatus
			default:
				answer["error"] = err.Error()
			}
		default:
			return fmt.Errorf("unknown op %q", cmd.Op)
		}
		if err := out.Encode(answer); err != nil {
			return err
		}
	}
	return in.Err()
}
