package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const repoRoot = "../.."

// TestGeneratedFileIsCurrent: test/docsnippets/snippets_test.go holds every
// go block of the Markdown as it is now (a block edited without `go
// generate ./test/docsnippets` fails here), and every block is marked,
// known and, when quoted, quoted word for word.
func TestGeneratedFileIsCurrent(t *testing.T) {
	t.Parallel()
	require.NoError(t, run(repoRoot, true))
}

// TestEveryGoBlockIsChecked: the blocks found are the README's and
// docs/client.md's (a walk that missed a directory would check nothing).
func TestEveryGoBlockIsChecked(t *testing.T) {
	t.Parallel()
	blocks, err := collect(repoRoot)
	require.NoError(t, err)
	files := map[string]int{}
	for _, b := range blocks {
		files[b.file]++
	}
	assert.GreaterOrEqual(t, files["README.md"], 4)
	assert.GreaterOrEqual(t, files["docs/client.md"], 7)
	src, err := os.ReadFile(filepath.Join(repoRoot, OutFile))
	require.NoError(t, err)
	for _, b := range blocks {
		if !strings.HasPrefix(b.mark, "in ") {
			assert.Contains(t, string(src), fmt.Sprintf("// %s, go block %d:\n", b.file, b.n), "%s is in the generated file", b)
		}
	}
}

func TestExtract(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		md      string
		want    []block
		wantErr string
	}{
		{
			name: "marked",
			md:   "text\n<!-- snippet: do -->\n```go\nx := 1\n```\n",
			want: []block{{file: "f.md", n: 1, line: 4, mark: "do", code: "x := 1\n"}},
		},
		{
			name: "quoted",
			md:   "<!--snippet: in examples/sdk/main.go-->\n```go\nx := 1\ny := 2\n```\n",
			want: []block{{file: "f.md", n: 1, line: 3, mark: "in examples/sdk/main.go", code: "x := 1\ny := 2\n"}},
		},
		{name: "other languages are not go", md: "```sh\nls\n```\n```ts\nx\n```\n"},
		{name: "unmarked", md: "text\n```go\nx := 1\n```\n", wantErr: "f.md:2: a go block without a <!-- snippet"},
		{name: "marker not just before", md: "<!-- snippet: do -->\n\n```go\nx := 1\n```\n", wantErr: "without a <!-- snippet"},
		{name: "golang fence", md: "```golang\nx := 1\n```\n", wantErr: "without a <!-- snippet"},
		{name: "indented", md: "- item\n  <!-- snippet: do -->\n  ```go\n  x := 1\n  ```\n", wantErr: "indented go block"},
		{name: "never ends", md: "<!-- snippet: do -->\n```go\nx := 1\n", wantErr: "never ends"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := extract("f.md", tt.md)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestGenerateRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		b       block
		wantErr string
	}{
		{"unknown wrapper", block{file: "f.md", line: 2, mark: "nope", code: "x := 1\n"}, `unknown snippet wrapper "nope"`},
		{"not Go", block{file: "f.md", line: 2, mark: "do", code: "resp, err := c.Do(ctx, conn, func() { … })\n"}, "not a Go statement list"},
		{"not gofmt-formatted", block{file: "f.md", line: 2, mark: "do", code: "resp, err := c.Do(ctx,conn, nil)\n"}, "not gofmt-formatted"},
		{"misquoted", block{file: "f.md", line: 2, mark: "in examples/sdk/main.go", code: "cl, err := client.New(c.cooldownd, client.WithToken(c.tokn))\n"}, "not examples/sdk/main.go's code word for word"},
		{"quotes a missing file", block{file: "f.md", line: 2, mark: "in nowhere.go", code: "x := 1\n"}, "quotes nowhere.go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := generate(repoRoot, []block{tt.b})
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestQuotedIndentation: a block quoted from inside a function matches at
// the function's indentation, blank lines included, and not at another.
func TestQuotedIndentation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.go"), []byte("func f() {\n\tif a {\n\t\tb()\n\n\t}\n}\n"), 0o644))
	b := func(code string) block { return block{file: "f.md", line: 2, mark: "in x.go", code: code} }
	assert.NoError(t, quoted(dir, b("if a {\n\tb()\n\n}\n"), "x.go"))
	assert.Error(t, quoted(dir, b("if a {\nb()\n}\n"), "x.go"))
}

// TestDeclaredNames: a fragment's own top-level names are marked used, not
// the ones of its closures.
func TestDeclaredNames(t *testing.T) {
	t.Parallel()
	got, err := declaredNames("a, err := f()\nvar b, c int\n_, d := g()\nfunc() { e := 1; _ = e }()\nerr = h()\n")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "err", "b", "c", "d"}, got)
}

// TestProseEditsKeepTheFile: moving a block down (prose added above it)
// generates the same file; only a block's code, wrapper or place among
// the file's blocks changes it.
func TestProseEditsKeepTheFile(t *testing.T) {
	t.Parallel()
	md := "<!-- snippet: do -->\n```go\nresp, err := c.Do(ctx, conn, nil)\n```\n"
	gen := func(md string) string {
		t.Helper()
		bs, err := extract("docs/x.md", md)
		require.NoError(t, err)
		src, err := generate(repoRoot, bs)
		require.NoError(t, err)
		return string(src)
	}
	base := gen(md)
	assert.Contains(t, base, "func TestDocsXBlock1(t *testing.T)")
	assert.Equal(t, base, gen("Some prose.\n\nMore prose.\n"+md), "prose above the block")
	assert.NotEqual(t, base, gen(strings.Replace(md, "nil", "call", 1)), "the block's code")
	assert.Contains(t, gen("<!-- snippet: in examples/sdk/main.go -->\n```go\nvar text string\n```\n"+md), "func TestDocsXBlock2(t *testing.T)",
		"a quoted block keeps its place in the count")
}
