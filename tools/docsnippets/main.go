// Command docsnippets turns every ```go block of the repository's Markdown
// (README.md, docs/, the clients' READMEs: every tracked *.md outside
// node_modules and testdata) into Go code that is compiled, and where it
// can be run, run: test/docsnippets/snippets_test.go. A snippet in the docs
// therefore cannot stop compiling, nor stop doing what it says, unnoticed.
//
// Each block is preceded, on the line just before its fence, by a comment
// that says how to check it (the comment does not show when the Markdown is
// rendered):
//
//	<!-- snippet: do -->              run inside the wrapper named "do" (wrappers.go)
//	<!-- snippet: in examples/sdk/main.go -->
//	                                  the block is that file's code, word for word
//	                                  (it compiles with the module and its tests run it)
//
// A wrapper declares the names a fragment uses (ctx, c, conn, url, body, …),
// gives the fragment's results to a runner in test/docsnippets (which runs
// it against an in-process cooldownd and fake providers and checks what the
// prose promises), and marks every name the fragment declares as used. The
// address "http://cooldownd:8080" in a snippet stands for the test's
// cooldownd. A block's test is named after its file and its place among
// the file's go blocks (TestDocsClientBlock3: the third of docs/client.md),
// never after a line number, so that editing the prose around the blocks
// leaves the generated file as it is.
//
// Run it from the repository's root (go generate ./test/docsnippets); with
// -check it writes nothing and fails when the generated file is stale or a
// block is unmarked, unknown or misquoted (its test does the same, so
// `make test` catches a snippet edited without regenerating).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// OutFile is the generated file, relative to the repository's root.
const OutFile = "test/docsnippets/snippets_test.go"

// cooldowndAddr is the cooldownd address snippets use; the generated code
// replaces it with the test's cooldownd.
const cooldowndAddr = `"http://cooldownd:8080"`

func main() {
	root := flag.String("root", ".", "the repository's root")
	check := flag.Bool("check", false, "write nothing; fail when "+OutFile+" is stale")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "docsnippets:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	blocks, err := collect(root)
	if err != nil {
		return err
	}
	src, err := generate(root, blocks)
	if err != nil {
		return err
	}
	path := filepath.Join(root, OutFile)
	if check {
		old, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(old, src) {
			return fmt.Errorf("%s is stale: run go generate ./test/docsnippets (or go run ./tools/docsnippets)", OutFile)
		}
		return nil
	}
	return os.WriteFile(path, src, 0o644)
}

// A block is one ```go block of a Markdown file.
type block struct {
	file string // slash-separated, relative to the root
	n    int    // its place among the file's go blocks, from 1
	line int    // of the first code line (the one after the fence)
	mark string // the marker's text: a wrapper's name, or "in <path>"
	code string
}

func (b block) String() string { return b.file + ":" + strconv.Itoa(b.line-1) }

// collect reads every Markdown file under root, in path order.
func collect(root string) ([]block, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "build") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	var all []block
	var errs []error
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil, err
		}
		bs, err := extract(filepath.ToSlash(rel), string(src))
		errs = append(errs, err)
		all = append(all, bs...)
	}
	return all, errors.Join(errs...)
}

var (
	goFence = regexp.MustCompile("^\\s*```\\s*(go|golang)\\b")
	marker  = regexp.MustCompile(`^<!--\s*snippet:\s*(.*?)\s*-->\s*$`)
)

// extract returns the ```go blocks of one Markdown file. A block without a
// marker on the line before its fence, or an indented one (in a list: its
// indentation would have to be guessed), is an error.
func extract(file, src string) ([]block, error) {
	lines := strings.Split(src, "\n")
	var out []block
	var errs []error
	for i := 0; i < len(lines); i++ {
		if !goFence.MatchString(lines[i]) {
			continue
		}
		start := i + 1
		end := start
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if end == len(lines) {
			return out, fmt.Errorf("%s:%d: a go block that never ends", file, i+1)
		}
		b := block{file: file, n: len(out) + len(errs) + 1, line: start + 1, code: strings.Join(lines[start:end], "\n") + "\n"}
		i = end
		switch {
		case strings.HasPrefix(lines[start-1], " ") || strings.HasPrefix(lines[start-1], "\t"):
			errs = append(errs, fmt.Errorf("%s: an indented go block: put it at the start of the line", b))
			continue
		case start < 2 || !marker.MatchString(lines[start-2]):
			errs = append(errs, fmt.Errorf("%s: a go block without a <!-- snippet: … --> line before it (see tools/docsnippets)", b))
			continue
		}
		b.mark = marker.FindStringSubmatch(lines[start-2])[1]
		out = append(out, b)
	}
	return out, errors.Join(errs...)
}

// generate renders the test file of blocks; a quoted block is checked
// against its source instead.
func generate(root string, blocks []block) ([]byte, error) {
	var body bytes.Buffer
	var errs []error
	for _, b := range blocks {
		if path, ok := strings.CutPrefix(b.mark, "in "); ok {
			errs = append(errs, quoted(root, b, path))
			continue
		}
		w, ok := wrappers[b.mark]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unknown snippet wrapper %q (the wrappers are in tools/docsnippets/wrappers.go)", b, b.mark))
			continue
		}
		fn, err := render(b, w)
		errs = append(errs, err)
		body.WriteString(fn)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteString("// Code generated by go run ./tools/docsnippets from the Markdown's go blocks; DO NOT EDIT.\n\n")
	out.WriteString("package docsnippets\n\n")
	out.WriteString(importsOf(body.String()))
	out.Write(body.Bytes())
	src, err := format.Source(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("format the generated code: %w\n%s", err, out.Bytes())
	}
	return src, nil
}

// render writes one block as a test that hands the wrapped fragment to its
// wrapper's runner.
func render(b block, w wrapper) (string, error) {
	code := strings.ReplaceAll(b.code, cooldowndAddr, "cooldowndURL")
	declared, err := declaredNames(code)
	if err != nil {
		return "", fmt.Errorf("%s: %w", b, err)
	}
	if err := gofmted(b.code); err != nil {
		return "", fmt.Errorf("%s: %w", b, err)
	}
	name := "Test" + testName(b.file) + "Block" + strconv.Itoa(b.n)
	var s strings.Builder
	fmt.Fprintf(&s, "// %s is go block %d of %s (wrapper %q: %s).\n", name, b.n, b.file, b.mark, w.doc)
	fmt.Fprintf(&s, "func %s(t *testing.T) {\n\tt.Parallel()\n\t%s(t, func(e *env) %s {\n", name, w.runner, w.results)
	var vars []string
	for _, v := range w.vars {
		fmt.Fprintf(&s, "\t\t%s := %s\n", v[0], v[1])
		vars = append(vars, v[0])
	}
	if len(vars) > 0 {
		fmt.Fprintf(&s, "\t\t%s = %s\n", strings.TrimSuffix(strings.Repeat("_, ", len(vars)), ", "), strings.Join(vars, ", "))
	}
	fmt.Fprintf(&s, "\t\t// %s, go block %d:\n", b.file, b.n)
	s.WriteString(code)
	s.WriteString("\t\t// (end of the block)\n")
	for _, d := range declared {
		if !slices.Contains(vars, d) { // a fragment's own names; a wrapper's are used already
			fmt.Fprintf(&s, "\t\t_ = %s\n", d)
		}
	}
	if w.post != "" {
		s.WriteString(w.post + "\n")
	}
	s.WriteString("\t})\n}\n\n")
	return s.String(), nil
}

// testName turns docs/client.md into DocsClient.
func testName(file string) string {
	file = strings.TrimSuffix(file, ".md")
	var s strings.Builder
	for _, part := range strings.FieldsFunc(file, func(r rune) bool { return r == '/' || r == '-' || r == '_' || r == '.' }) {
		if strings.ToUpper(part) == part {
			s.WriteString(part)
		} else {
			s.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return s.String()
}

// declaredNames are the names a fragment declares at its top level (:= and
// var), which the generated code marks as used: a fragment may show a
// result it does not use.
func declaredNames(code string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+code+"}\n", parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("not a Go statement list: %w", err)
	}
	var out []string
	add := func(id *ast.Ident) {
		if id.Name != "_" && !slices.Contains(out, id.Name) {
			out = append(out, id.Name)
		}
	}
	for _, st := range f.Decls[0].(*ast.FuncDecl).Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, sp := range gd.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	return out, nil
}

// gofmted fails unless code is as gofmt writes it: a reader copies it.
func gofmted(code string) error {
	const head = "package p\n\nfunc _() {\n"
	indented := "\t" + strings.ReplaceAll(strings.TrimSuffix(code, "\n"), "\n", "\n\t") + "\n"
	indented = strings.ReplaceAll(indented, "\n\t\n", "\n\n")
	src := head + indented + "}\n"
	got, err := format.Source([]byte(src))
	if err != nil {
		return err
	}
	if string(got) != src {
		return fmt.Errorf("not gofmt-formatted; gofmt writes it as:\n%s", strings.TrimSuffix(strings.TrimPrefix(string(got), head), "}\n"))
	}
	return nil
}

// imports maps the package names that snippets, wrappers and runners use
// to their paths; importsOf imports those the generated code names.
var imports = map[string]string{
	"bytes":     "bytes",
	"context":   "context",
	"errors":    "errors",
	"fmt":       "fmt",
	"http":      "net/http",
	"io":        "io",
	"os":        "os",
	"strings":   "strings",
	"testing":   "testing",
	"time":      "time",
	"client":    "github.com/cooldownd/cooldownd/client",
	"openai":    "github.com/openai/openai-go/v3",
	"oaoption":  "oaoption github.com/openai/openai-go/v3/option",
	"anthropic": "github.com/anthropics/anthropic-sdk-go/v2",
	"antoption": "antoption github.com/anthropics/anthropic-sdk-go/v2/option",
}

func importsOf(code string) string {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+code, parser.SkipObjectResolution)
	used := map[string]bool{}
	if err == nil {
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok {
					used[id.Name] = true
				}
			}
			return true
		})
	}
	var paths []string
	for name, path := range imports {
		if used[name] {
			name, path, ok := strings.Cut(path, " ")
			if ok {
				paths = append(paths, name+" "+strconv.Quote(path))
			} else {
				paths = append(paths, strconv.Quote(name))
			}
		}
	}
	slices.Sort(paths)
	return "import (\n\t" + strings.Join(paths, "\n\t") + "\n)\n\n"
}

// quoted checks that b is path's code word for word (up to a common
// indentation, as a block inside a function is quoted from the left).
func quoted(root string, b block, path string) error {
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if err != nil {
		return fmt.Errorf("%s: quotes %s: %w", b, path, err)
	}
	want := strings.Split(strings.TrimSuffix(b.code, "\n"), "\n")
	have := strings.Split(string(src), "\n")
	for i := range have {
		indent := have[i][:len(have[i])-len(strings.TrimLeft(have[i], "\t"))]
		if i+len(want) > len(have) {
			break
		}
		ok := true
		for k, w := range want {
			h := have[i+k]
			if !(h == indent+w || (w == "" && strings.TrimSpace(h) == "")) {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("%s: the block is not %s's code word for word (edit both, or change its marker)", b, path)
}
