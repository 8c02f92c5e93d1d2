package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// lineOf is the 1-based line of the first line of file that contains text.
func lineOf(t *testing.T, file, text string) int {
	t.Helper()
	b, err := luaFiles.ReadFile(file)
	require.NoError(t, err)
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) {
			return i + 1
		}
	}
	t.Fatalf("%s has no line with %q", file, text)
	return 0
}

// TestLuaErrorNamesItsFile: a Lua error raised in a script part is
// reported with that part's own file and line, not its line in the
// concatenated script. Admit with a throttle draw that is not a number
// makes admit.lua's arithmetic on it fail (its full script: the
// connection has no state, so the fast path hands over), and a script made
// for the test raises an error in the prelude's reply.lua.
func TestLuaErrorNamesItsFile(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	ctx := context.Background()
	s, err := New(rdb, Options{})
	require.NoError(t, err)
	c := Conn{Tenant: "t", ID: keys.ID{9, 9}}
	l := c.layout()
	args := []any{s.nowArg(), "0", s.policyArg(breaker.DefaultPolicy()), keys.Channel(l.Tenant), l.ID.String(), "n", "0", "not a number"}
	err = unavailable("admit", scriptAdmit.run(ctx, rdb, connKeys(l), args...).Err())
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInternal)
	var rerr redis.Error
	assert.True(t, errors.As(err, &rerr), "the Redis error is still wrapped")
	line := lineOf(t, "lua/admit.lua", "tonumber(ARGV[base + 5]) / 1e6")
	assert.Contains(t, err.Error(), "lua/admit.lua:"+itoa(line)+": ", err.Error())

	// A part of its own, after the whole prelude: its line 2.
	src, sha := loadScript(append(append([]string{"lua/head.lua"}, prelude...), "lua/get.lua")...)
	require.NotEmpty(t, sha)
	// The same parts with get.lua's reply replaced by a call of a nil:
	// loadScript's map is by SHA, so a test script needs its own.
	broken := strings.Replace(src, "return reply(", "return nothing_here(", 1)
	require.NotEqual(t, src, broken)
	brokenLine := strings.Count(broken[:strings.Index(broken, "return nothing_here(")], "\n") + 1
	m := lineMapOf(t, sha)
	scriptLines.Store(sha1hex(broken), m)
	err = unavailable("get", redis.NewScript(broken).Run(ctx, rdb, connKeys(l), s.args(breaker.DefaultPolicy(), l, 0)...).Err())
	require.Error(t, err)
	want, ok := m.where(brokenLine)
	require.True(t, ok)
	require.Regexp(t, regexp.MustCompile(`^lua/get\.lua:\d+$`), want)
	assert.Contains(t, err.Error(), want+": ", err.Error())
}

func lineMapOf(t *testing.T, sha string) lineMap {
	t.Helper()
	m, ok := scriptLines.Load(sha)
	require.True(t, ok)
	return m.(lineMap)
}

func itoa(n int) string { return strconv.Itoa(n) }

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
