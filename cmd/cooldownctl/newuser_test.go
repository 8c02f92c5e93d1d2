package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// TestStateNames: every view names half-open as the flags, the dashboard
// and the docs do (list printed half_open).
func TestStateNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state cooldownv1.State
		want  string
	}{
		{cooldownv1.State_STATE_CLOSED, "closed"},
		{cooldownv1.State_STATE_OPEN, "open"},
		{cooldownv1.State_STATE_HALF_OPEN, "half-open"},
		{cooldownv1.State_STATE_UNSPECIFIED, "closed"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			c := &cooldownv1.ConnectionState{State: tt.state}
			assert.Equal(t, tt.want, stateText(c), "list's STATE and get's State")
			if tt.state != cooldownv1.State_STATE_UNSPECIFIED {
				assert.Equal(t, tt.state, parseState(tt.want), "--state takes what is printed")
			}

			var out bytes.Buffer
			e := &env{stdout: &out, g: globals{output: "table"}}
			require.NoError(t, e.printEvent(&cooldownv1.WatchConnectionsResponse{Connection: c,
				Transition: &cooldownv1.Transition{From: cooldownv1.State_STATE_OPEN, To: tt.state, Cause: cooldownv1.Cause_CAUSE_OPEN_EXPIRED}}))
			if tt.state != cooldownv1.State_STATE_UNSPECIFIED {
				assert.Regexp(t, `open\s+→ `+tt.want+`\s`, out.String(), "watch's transitions")
			}
		})
	}
}

// TestLeft: LEFT counts down what the dashboard counts down: an open
// period, and a timed override, forced closed too (list showed "-").
func TestLeft(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	open, closed, half := cooldownv1.State_STATE_OPEN, cooldownv1.State_STATE_CLOSED, cooldownv1.State_STATE_HALF_OPEN
	fo, fc := cooldownv1.Override_OVERRIDE_FORCED_OPEN, cooldownv1.Override_OVERRIDE_FORCED_CLOSED
	tests := []struct {
		name string
		c    *cooldownv1.ConnectionState
		want string
	}{
		{"a cooldown", &cooldownv1.ConnectionState{State: open, OpenUntil: at(30 * time.Second), RetryAfter: durationpb.New(29600 * time.Millisecond)}, "30s"},
		{"forced open for 10m", &cooldownv1.ConnectionState{State: open, Override: fo, OpenUntil: at(10 * time.Minute), OverrideUntil: at(10 * time.Minute),
			RetryAfter: durationpb.New(10 * time.Minute)}, "10m"},
		{"forced open until changed", &cooldownv1.ConnectionState{State: open, Override: fo}, "until changed"},
		{"forced closed for 15m", &cooldownv1.ConnectionState{State: closed, Override: fc, OverrideUntil: at(15 * time.Minute)}, "15m"},
		{"forced closed until changed", &cooldownv1.ConnectionState{State: closed, Override: fc}, "-"},
		{"closed", &cooldownv1.ConnectionState{State: closed}, "-"},
		{"half-open", &cooldownv1.ConnectionState{State: half}, "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, left(tt.c, now))
		})
	}
}

// TestForcedClosedForAWhile: a timed forced-closed shows its time left in
// list and get, as the dashboard counts it down.
func TestForcedClosedForAWhile(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, hexID := s.rateLimited(t)
	r := s.ctl(t, admin(), "force", hexID, "closed", "--for", "15m", "--reason", "ignore failures")
	require.NoError(t, r.err, r.stderr)

	r = s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `closed \[forced_closed\]\s+-\s+1[45]m(\d+s)?\s`, lineWith(t, r.stdout, hexID[:8]))
	r = s.ctl(t, viewer(), "get", hexID)
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `Left\s+1[45]m(\d+s)? \(until \S+Z\)`, r.stdout)
}

// TestClearWithoutOverride: clearing when there is no override changes
// nothing, and says so (it recorded a transition and bumped the revision).
func TestClearWithoutOverride(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, hexID := s.rateLimited(t)
	rev := func() string {
		r := s.ctl(t, viewer(), "get", hexID)
		require.NoError(t, r.err, r.stderr)
		return regexp.MustCompile(`Revision\s+(\d+)`).FindStringSubmatch(r.stdout)[1]
	}
	before := rev()

	r := s.ctl(t, admin(), "force", hexID, "clear", "--reason", "tidy up")
	require.NoError(t, r.err, r.stderr)
	assert.Equal(t, hexID[:8]+" (openai gpt-4o) has no override: nothing to clear (now open, revision "+before+"). To close it, reset it.\n", r.stdout)
	assert.Equal(t, before, rev(), "the revision stays")
	r = s.ctl(t, viewer(), "get", hexID)
	require.NoError(t, r.err, r.stderr)
	assert.NotContains(t, r.stdout, "override_cleared")
	assert.Regexp(t, `State\s+open \(rate_limit\)`, r.stdout, "the cooldown stands")

	// With an override, clear clears it.
	r = s.ctl(t, admin(), "force", hexID, "closed", "--reason", "ignore failures")
	require.NoError(t, r.err, r.stderr)
	r = s.ctl(t, admin(), "force", hexID, "clear", "--reason", "done")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `^Cleared the override of `+hexID[:8]+` \(openai gpt-4o\): now closed, revision \d+\.\n$`, r.stdout)
}

// TestREADMEWalkthrough runs the README's cooldownctl commands, as written,
// on the connection of its curl walk-through (the id of 32 zero bytes, rate
// limited for 30 s): an id the README names must be one it created (it
// named 7d287c77, which finds nothing).
func TestREADMEWalkthrough(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	zero := make([]byte, 32)
	s.report(t, zero, "openai gpt-4o", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, 30*time.Second)

	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	var cmds [][]string
	for line := range strings.Lines(string(readme)) {
		if rest, ok := strings.CutPrefix(line, "go run ./cmd/cooldownctl "); ok {
			cmds = append(cmds, shellWords(t, rest))
		}
	}
	require.GreaterOrEqual(t, len(cmds), 5, "the README's cooldownctl lines")
	short := hex.EncodeToString(zero)[:8]
	for _, args := range cmds {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if args[0] == "watch" {
				ctx, cancel := context.WithCancel(t.Context())
				var out syncBuffer
				done := make(chan error, 1)
				go func() { done <- run(ctx, args, admin2env(s), &out, &bytes.Buffer{}) }()
				waitOutput(t, &out, short)
				cancel()
				require.NoError(t, <-done)
				return
			}
			r := s.ctl(t, admin(), args...)
			require.NoError(t, r.err, r.stderr)
			assert.Contains(t, r.stdout, short)
		})
	}
}

// admin2env is the environment of an admin's cooldownctl on s.
func admin2env(s *testServer) func(string) string {
	env := admin()
	env["COOLDOWNCTL_SERVER"] = s.url
	return func(k string) string { return env[k] }
}

// shellWords splits a README command line as sh would for these lines:
// words, "double-quoted" words, and a # comment to the end.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case quoted && r == '"':
			quoted = false
		case quoted:
			w.WriteRune(r)
		case r == '"':
			quoted, inWord = true, true
		case r == '#' && !inWord:
			return words
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	require.False(t, quoted, "an unterminated quote in %q", line)
	if inWord {
		words = append(words, w.String())
	}
	return words
}
