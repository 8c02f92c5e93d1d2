// Command quickstart is the README's first example, word for word: one
// openai-go call guarded by cooldownd through the client's RoundTripper.
// test/quickstart_test.go runs the README's copy of it as pasted, in a
// fresh module made with the README's install block.
//
//	COOLDOWND_URL=http://127.0.0.1:8080 OPENAI_API_KEY=... go run ./examples/quickstart
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/cooldownd/cooldownd/client"
)

func main() {
	cd, err := client.New(cmp.Or(os.Getenv("COOLDOWND_URL"), "http://127.0.0.1:8080"), client.WithToken(os.Getenv("COOLDOWND_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	defer cd.Close()
	// One connection per endpoint and key (and model): its id is a keyed hash made here, the key never leaves the process.
	gpt, err := cd.Connection("openai", cmp.Or(os.Getenv("OPENAI_BASE_URL"), "https://api.openai.com/v1"), os.Getenv("OPENAI_API_KEY"), "gpt-5.5", "")
	if err != nil {
		log.Fatal(err)
	}
	// The guard admits each request with cooldownd, retries it and reports how it went: the SDK's own retries stay off.
	oa := openai.NewClient(option.WithHTTPClient(&http.Client{Transport: cd.RoundTripper(gpt, nil)}), option.WithMaxRetries(0))
	r, err := oa.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    openai.ChatModelGPT5_5,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello in five words.")},
	})
	if err != nil {
		log.Fatal(err) // a call cooldownd denied is a *client.DeniedError (errors.As)
	}
	fmt.Println(r.Choices[0].Message.Content)
}
