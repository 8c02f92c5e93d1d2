package store

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// luaFiles are the scripts' parts (lua/*.lua, lua/prelude/*.lua).
//
//go:embed lua
var luaFiles embed.FS

// span is one part's lines in a concatenated script.
type span struct {
	file        string
	first, last int // 1-based lines of the script
}

// lineMap says where each line of a concatenated script came from.
type lineMap []span

// where names line n of the script as file:line.
func (m lineMap) where(n int) (string, bool) {
	for _, s := range m {
		if n >= s.first && n <= s.last {
			return fmt.Sprintf("%s:%d", s.file, n-s.first+1), true
		}
	}
	return "", false
}

// scriptLines are the line maps of every script the store loaded, by SHA1:
// a Redis script error names the script's SHA and its line.
var scriptLines sync.Map

// loadScript concatenates the parts (files of luaFiles, e.g.
// "lua/admit.lua") in order, folds the schema's constants (luaConstants,
// lua/schema.lua) into each, and records the line map. It panics on a
// missing file or a name the schema does not declare: a bug that the
// store's tests meet first.
func loadScript(parts ...string) (src, sha string) {
	var b strings.Builder
	var m lineMap
	line := 1
	for _, name := range parts {
		raw, err := luaFiles.ReadFile(name)
		if err != nil {
			panic(fmt.Sprintf("store: script part: %v", err))
		}
		text := string(raw)
		if name != "lua/schema.lua" {
			if text, err = foldConstants(name, text); err != nil {
				panic(err.Error())
			}
		}
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		n := strings.Count(text, "\n")
		m = append(m, span{file: name, first: line, last: line + n - 1})
		line += n
		b.WriteString(text)
	}
	src = b.String()
	sum := sha1.Sum([]byte(src))
	sha = hex.EncodeToString(sum[:])
	scriptLines.Store(sha, m)
	return src, sha
}

// constantName is a name that may be one of the schema's constants:
// NAME or GROUP.NAME (not a field of something else).
var constantName = regexp.MustCompile(`[A-Z][A-Z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?`)

// constantGroups are the GROUP of every GROUP.NAME constant.
var constantGroups = func() map[string]bool {
	g := map[string]bool{}
	for name := range luaConstants {
		if group, _, ok := strings.Cut(name, "."); ok {
			g[group] = true
		}
	}
	return g
}()

// foldConstants replaces each of the schema's constants in src's code
// (not its comments) with its value. A GROUP.NAME of a known group that
// the schema lacks is an error naming file and line.
func foldConstants(file, src string) (string, error) {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		code, comment := splitComment(l)
		var out strings.Builder
		last := 0
		for _, loc := range constantName.FindAllStringIndex(code, -1) {
			if loc[0] > 0 {
				if c := code[loc[0]-1]; c == '.' || c == '_' || c == '\'' || c == '"' ||
					(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
					continue
				}
			}
			tok := code[loc[0]:loc[1]]
			v, ok := luaConstants[tok]
			if !ok {
				if group, _, dotted := strings.Cut(tok, "."); dotted && constantGroups[group] {
					return "", fmt.Errorf("store: %s:%d: %s is not in lua/schema.lua", file, i+1, tok)
				}
				continue
			}
			out.WriteString(code[last:loc[0]])
			out.WriteString(v)
			last = loc[1]
		}
		out.WriteString(code[last:])
		lines[i] = out.String() + comment
	}
	return strings.Join(lines, "\n"), nil
}

// splitComment cuts a line of Lua at its comment (a -- outside a string).
func splitComment(l string) (code, comment string) {
	var quote byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && i+1 < len(l) && l[i+1] == '-':
			return l[:i], l[i:]
		}
	}
	return l, ""
}

// scriptLine finds a Redis script error's script and line: Redis 7 says
// "user_script:LINE: ... script: SHA, on @user_script:LINE.".
var scriptLine = regexp.MustCompile(`user_script:(\d+)`)
var scriptSHA = regexp.MustCompile(`script: ([0-9a-f]{40})`)

// scriptError is a Lua error with its place in the script's own files.
type scriptError struct {
	err   error
	where string
}

func (e *scriptError) Error() string { return e.where + ": " + e.err.Error() }
func (e *scriptError) Unwrap() error { return e.err }

// explainScriptError names the file and line of a Lua error raised by one
// of the store's scripts (its line in the concatenated script means
// nothing to a reader); any other error is returned as it is.
func explainScriptError(err error) error {
	if err == nil {
		return nil
	}
	var se *scriptError
	if errors.As(err, &se) {
		return err
	}
	msg := err.Error()
	sm, lm := scriptSHA.FindStringSubmatch(msg), scriptLine.FindStringSubmatch(msg)
	if sm == nil || lm == nil {
		return err
	}
	m, ok := scriptLines.Load(sm[1])
	if !ok {
		return err
	}
	n, _ := strconv.Atoi(lm[1])
	w, ok := m.(lineMap).where(n)
	if !ok {
		return err
	}
	return &scriptError{err: err, where: w}
}
