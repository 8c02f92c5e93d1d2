// Command apicheck is the gate of make apicheck (decision 0043): it reads
// an apidiff report of the client module against its last release (the
// output of apidiff -m, both sections) and fails when the report has an
// incompatible change that the CHANGELOG's Unreleased section does not
// name under a "### Breaking" heading. Compatible changes are printed and
// pass.
//
//	apidiff -m client/api/v0.1.0.apidiff github.com/cooldownd/cooldownd/client | apicheck -changelog CHANGELOG.md
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

func main() {
	changelog := flag.String("changelog", "CHANGELOG.md", "the CHANGELOG whose Unreleased section may name breaking changes")
	flag.Parse()
	log, err := os.ReadFile(*changelog)
	if err == nil {
		err = check(os.Stdin, string(log), os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

// check reads an apidiff report from r and the CHANGELOG's text, writes
// what it found to w, and returns an error naming every incompatible
// change the Unreleased section's Breaking list does not name.
func check(r io.Reader, changelog string, w io.Writer) error {
	incompatible, compatible, err := parseReport(r)
	if err != nil {
		return err
	}
	for _, c := range compatible {
		fmt.Fprintf(w, "compatible: %s\n", c)
	}
	if len(incompatible) == 0 {
		fmt.Fprintln(w, "apicheck: no incompatible change since the last release")
		return nil
	}
	breaking := breakingSection(changelog)
	var missing []string
	for _, c := range incompatible {
		if id := changed(c); breaking == "" || !names(breaking, id) {
			missing = append(missing, c)
			continue
		}
		fmt.Fprintf(w, "breaking (in the CHANGELOG): %s\n", c)
	}
	if len(missing) > 0 {
		return fmt.Errorf("incompatible changes to the client's API since the last release, not named under "+
			"\"### Breaking\" in the CHANGELOG's Unreleased section:\n- %s", strings.Join(missing, "\n- "))
	}
	return nil
}

// parseReport splits apidiff's text report into its incompatible and
// compatible changes.
func parseReport(r io.Reader) (incompatible, compatible []string, err error) {
	var into *[]string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t")
		switch {
		case line == "":
		case line == "Incompatible changes:":
			into = &incompatible
		case line == "Compatible changes:":
			into = &compatible
		case strings.HasPrefix(line, "- ") && into != nil:
			*into = append(*into, strings.TrimPrefix(line, "- "))
		default:
			return nil, nil, fmt.Errorf("not an apidiff report line: %q", line)
		}
	}
	return incompatible, compatible, sc.Err()
}

// changed is the identifier a change is about: its text before ": "
// ("Policy.TripQuorum" of "Policy.TripQuorum: removed"; apidiff writes
// "./clienttest.WithSleep" for a name of another package of the module,
// which is clienttest.WithSleep), or the package of a "package PATH:
// removed".
func changed(c string) string {
	id, _, _ := strings.Cut(c, ": ")
	return strings.TrimPrefix(strings.TrimPrefix(id, "package "), "./")
}

// breakingSection is the text of the "### Breaking" list in the
// CHANGELOG's Unreleased section ("## [Unreleased]" or "## Unreleased"),
// empty when there is none.
func breakingSection(changelog string) string {
	var in, breaking bool
	var b strings.Builder
	for line := range strings.SplitSeq(changelog, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			title := strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "## ")), "[]")
			in, breaking = strings.EqualFold(title, "Unreleased"), false
		case in && strings.HasPrefix(line, "### "):
			breaking = strings.EqualFold(strings.TrimSpace(strings.TrimPrefix(line, "### ")), "Breaking")
		case in && breaking:
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// names reports whether text names the identifier id as a whole word
// (`Policy` is named by "`Policy`" and "the Policy.", not by
// "Policy.Jitter" nor "Policys").
func names(text, id string) bool {
	return regexp.MustCompile(`(^|[^\w.])` + regexp.QuoteMeta(id) + `($|[^\w.]|\.(\s|$))`).MatchString(text)
}
