// Package docsnippets compiles and runs the go blocks of the repository's
// Markdown (README.md, docs/*.md, the clients' READMEs), so that a snippet
// a reader copies compiles and does what its prose says.
//
// snippets_test.go is generated from the Markdown by tools/docsnippets
// (each block names its wrapper in a <!-- snippet: … --> comment); the
// runners in harness_test.go run each wrapped block against an in-process
// cooldownd and fake providers. After editing a go block, regenerate:
//
//	go generate ./test/docsnippets
package docsnippets

//go:generate go run ../../tools/docsnippets -root ../..
