package keys_test

import (
	"errors"
	"fmt"

	"github.com/cooldownd/cooldownd/internal/keys"
)

func ExampleDerive() {
	c := keys.Connection{
		Provider:   "OpenAI",
		Endpoint:   "HTTPS://api.openai.com:443/v1/",
		Credential: "sk-test-0123456789abcdef",
		Scope:      "gpt-4o",
	}
	id, err := keys.Derive(nil, c) // Production uses a shared salt.
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(id)
	fmt.Println(c) // The credential is never printed.
	fmt.Println("label: openai gpt-4o " + id.Short() + "…")
	// Output:
	// f3612d0254c7ab99edd32f37f1d989eefa9c8f9ae5eb35b588c172e9b94a50e0
	// openai https://api.openai.com/v1 scope="gpt-4o"
	// label: openai gpt-4o f3612d02…
}

func ExampleNormalizeEndpoint() {
	for _, raw := range []string{
		"HTTPS://API.OpenAI.com:443/v1/",
		"http://[0:0::1]:8080/",
		"https://user:sk-secret@example.com/v1",
	} {
		endpoint, err := keys.NormalizeEndpoint(raw)
		if errors.Is(err, keys.ErrInvalidEndpoint) {
			fmt.Println(err) // The error does not quote the input.
			continue
		}
		fmt.Println(endpoint)
	}
	// Output:
	// https://api.openai.com/v1
	// http://[::1]:8080
	// keys: invalid endpoint: userinfo is not allowed
}
