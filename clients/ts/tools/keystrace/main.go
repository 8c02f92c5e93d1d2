// Command keystrace normalises endpoints with the Go implementation
// (internal/keys) for the TypeScript client's differential test
// (clients/ts/test/keys.test.ts): it reads a JSON array of strings on
// stdin and writes, for each, {"ok":bool,"out":string}.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/cooldownd/cooldownd/internal/keys"
)

type result struct {
	OK  bool   `json:"ok"`
	Out string `json:"out"`
}

func main() {
	var in []string
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "keystrace:", err)
		os.Exit(1)
	}
	out := make([]result, len(in))
	for i, s := range in {
		n, err := keys.NormalizeEndpoint(s)
		out[i] = result{OK: err == nil, Out: n}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "keystrace:", err)
		os.Exit(1)
	}
}
