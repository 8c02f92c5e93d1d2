// Command sdk guards the official OpenAI and Anthropic Go SDKs with
// cooldownd in one program: one guarded http.Client per connection with the
// SDKs' own retries off, and a DoFallback from gpt-5.5 to Claude that returns
// the answer's text. The README quotes it, and its test runs it against a
// real cooldownd and two fake providers.
//
//	COOLDOWND_URL=http://127.0.0.1:8080 OPENAI_API_KEY=... ANTHROPIC_API_KEY=... \
//	  go run ./examples/sdk "Say hello in five words."
//
// OPENAI_BASE_URL and ANTHROPIC_BASE_URL point the SDKs elsewhere (a proxy,
// a compatible endpoint); COOLDOWND_TOKEN is a client token.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"

	"github.com/cooldownd/cooldownd/client"
)

// config is what the program reads from its environment.
type config struct {
	cooldownd, token           string
	openaiURL, openaiKey       string
	anthropicURL, anthropicKey string
}

func configFromEnv(getenv func(string) string) (config, error) {
	or := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	c := config{
		cooldownd: or("COOLDOWND_URL", "http://127.0.0.1:8080"), token: getenv("COOLDOWND_TOKEN"),
		openaiURL: or("OPENAI_BASE_URL", "https://api.openai.com/v1"), openaiKey: getenv("OPENAI_API_KEY"),
		anthropicURL: or("ANTHROPIC_BASE_URL", "https://api.anthropic.com"), anthropicKey: getenv("ANTHROPIC_API_KEY"),
	}
	if c.openaiKey == "" || c.anthropicKey == "" {
		return c, errors.New("set OPENAI_API_KEY and ANTHROPIC_API_KEY")
	}
	return c, nil
}

// models are the SDK clients of the two connections.
type models struct {
	cl          *client.Client
	gpt, claude client.Conn
	// Guarded: every request goes through cooldownd (admit, report, retry).
	oa openai.Client
	an anthropic.Client
	// Plain: inside DoFallback, which is the guard itself.
	oaPlain openai.Client
	anPlain anthropic.Client
}

func newModels(c config) (*models, error) {
	// README:start clients
	cl, err := client.New(c.cooldownd, client.WithToken(c.token))
	if err != nil {
		return nil, err
	}
	// One connection per endpoint and credential (and model): the id is a
	// keyed hash computed here, the key never leaves this process.
	gpt, err := cl.Connection("openai", c.openaiURL, c.openaiKey, "gpt-5.5", "openai gpt-5.5")
	if err != nil {
		return nil, err
	}
	claude, err := cl.Connection("anthropic", c.anthropicURL, c.anthropicKey, "claude-sonnet-5-5", "anthropic claude-sonnet-5-5")
	if err != nil {
		return nil, err
	}
	// One guarded http.Client per connection; the SDKs' retries off, so the
	// guard's retries are not nested in theirs and a denied call is not retried.
	oa := openai.NewClient(
		oaoption.WithAPIKey(c.openaiKey), oaoption.WithBaseURL(c.openaiURL),
		oaoption.WithHTTPClient(&http.Client{Transport: cl.RoundTripper(gpt, nil)}),
		oaoption.WithMaxRetries(0))
	an := anthropic.NewClient(
		antoption.WithAPIKey(c.anthropicKey), antoption.WithBaseURL(c.anthropicURL),
		antoption.WithHTTPClient(&http.Client{Transport: cl.RoundTripper(claude, nil)}),
		antoption.WithMaxRetries(0))
	// README:end
	return &models{
		cl: cl, gpt: gpt, claude: claude, oa: oa, an: an,
		oaPlain: openai.NewClient(oaoption.WithAPIKey(c.openaiKey), oaoption.WithBaseURL(c.openaiURL), oaoption.WithMaxRetries(0)),
		anPlain: anthropic.NewClient(antoption.WithAPIKey(c.anthropicKey), antoption.WithBaseURL(c.anthropicURL), antoption.WithMaxRetries(0)),
	}, nil
}

// askGPT asks gpt-5.5 through the guarded SDK client.
func (m *models) askGPT(ctx context.Context, prompt string) (string, error) {
	// README:start guarded
	c, err := m.oa.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    openai.ChatModelGPT5_5,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	if err != nil {
		return "", err // a denial is a *client.DeniedError (errors.As), a provider error the SDK's own
	}
	// README:end
	if len(c.Choices) == 0 {
		return "", errors.New("openai: no choice in the answer")
	}
	return c.Choices[0].Message.Content, nil
}

// ask sends prompt to gpt-5.5, or to Claude when gpt-5.5 is cooling down, open,
// out of quota or its key is rejected, and returns the answer's text and the
// connection that gave it.
func (m *models) ask(ctx context.Context, prompt string) (string, client.Conn, error) {
	// README:start fallback
	var text string
	var from client.Conn
	resp, err := m.cl.DoFallback(ctx, []client.Conn{m.gpt, m.claude}, func(ctx context.Context, conn client.Conn) (*http.Response, error) {
		var raw *http.Response // the SDK's response: the guard classifies and reports it
		var err error
		if conn.ID() == m.gpt.ID() {
			var c *openai.ChatCompletion
			c, err = m.oaPlain.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:    openai.ChatModelGPT5_5,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
			}, oaoption.WithResponseInto(&raw))
			if err == nil && len(c.Choices) > 0 {
				text, from = c.Choices[0].Message.Content, conn
			}
		} else {
			var msg *anthropic.Message
			msg, err = m.anPlain.Messages.New(ctx, anthropic.MessageNewParams{
				Model:     anthropic.ModelClaudeSonnet5_5,
				MaxTokens: 1024,
				Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
			}, antoption.WithResponseInto(&raw))
			if err == nil {
				text, from = textOf(msg), conn
			}
		}
		if raw != nil {
			return raw, nil // also on an API error: both SDKs put its body back for the guard to read
		}
		return nil, err // no response at all (a connection error)
	})
	if err != nil {
		return "", client.Conn{}, err
	}
	_ = resp.Body.Close()
	// README:end
	return text, from, nil
}

// textOf joins the text blocks of a Claude message.
func textOf(msg *anthropic.Message) string {
	var b strings.Builder
	for _, block := range msg.Content {
		if t, ok := block.AsAny().(anthropic.TextBlock); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c, err := configFromEnv(getenv)
	if err != nil {
		return err
	}
	prompt := "Say hello in five words."
	if len(args) > 0 {
		prompt = strings.Join(args, " ")
	}
	m, err := newModels(c)
	if err != nil {
		return err
	}
	defer m.cl.Close()
	text, from, err := m.ask(ctx, prompt)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s\n", from.Label(), text)
	return nil
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sdk:", err)
		os.Exit(1)
	}
}
