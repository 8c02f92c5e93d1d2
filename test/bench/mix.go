package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

// mixPhase is the cluster run's phase whose command mix is printed
// (-command-mix): a diagnostic, since the SLOWLOG it reads costs the
// masters a log entry per command and slows that phase.
var mixPhase string

// commandMix is each master's commands over a window: INFO commandstats
// by name (scripts' inner commands included) and, from a SLOWLOG that
// logs every command (those scripts call too), the commands by name and
// key shape (ids, numbers and tokens as #). It is how the sweeper's first
// looks at new connections were found in the last phases (docs/scaling.md).
type commandMix struct {
	mons   []*redis.Client
	before []map[string]int64
}

func (m *commandMix) open(ctx context.Context) {
	m.before = nil
	for _, c := range m.mons {
		c.ConfigSet(ctx, "slowlog-max-len", "1000000")
		c.ConfigSet(ctx, "slowlog-log-slower-than", "0")
		c.SlowLogReset(ctx)
		m.before = append(m.before, cmdCalls(ctx, c))
	}
}

var digits = regexp.MustCompile(`[0-9a-f]{16,}|[A-Za-z0-9_-]{20,}|[0-9]+`)

func (m *commandMix) close(ctx context.Context, secs float64) string {
	var out strings.Builder
	for i, c := range m.mons {
		after := cmdCalls(ctx, c)
		c.ConfigSet(ctx, "slowlog-log-slower-than", "10000")
		var rows []string
		for k, v := range after {
			if d := v - m.before[i][k]; d > 0 {
				rows = append(rows, fmt.Sprintf("%8.0f/s %s", float64(d)/secs, k))
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(rows)))
		fmt.Fprintf(&out, "master %d, INFO commandstats:\n  %s\n", i, strings.Join(rows, "\n  "))
		log, _ := c.Do(ctx, "SLOWLOG", "GET", "-1").Slice()
		shapes := map[string]int{}
		for _, e := range log {
			f, _ := e.([]any)
			if len(f) < 4 {
				continue
			}
			args, _ := f[3].([]any)
			var parts []string
			for j, a := range args {
				if j > 4 {
					break
				}
				parts = append(parts, digits.ReplaceAllString(fmt.Sprint(a), "#"))
			}
			shapes[strings.Join(parts, " ")]++
		}
		rows = rows[:0]
		for k, v := range shapes {
			rows = append(rows, fmt.Sprintf("%8.0f/s %s", float64(v)/secs, k))
		}
		sort.Sort(sort.Reverse(sort.StringSlice(rows)))
		if len(rows) > 15 {
			rows = rows[:15]
		}
		fmt.Fprintf(&out, "master %d, SLOWLOG (%d commands, the 15 most frequent shapes):\n  %s\n", i, len(log), strings.Join(rows, "\n  "))
	}
	return out.String()
}

func cmdCalls(ctx context.Context, c *redis.Client) map[string]int64 {
	info, _ := c.Info(ctx, "commandstats").Result()
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if ok && strings.HasPrefix(strings.TrimSpace(line), "cmdstat_") {
			out[name] = kvInt(rest, "calls")
		}
	}
	return out
}
