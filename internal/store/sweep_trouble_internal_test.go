package store

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestSweepTroubleLogsOnceEachWay: a sweeper failing round after round
// logs one warning when it starts and one line when it works again, with
// how long and how many rounds it failed.
func TestSweepTroubleLogsOnceEachWay(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	tr := sweepTrouble{log: slog.New(slog.NewTextHandler(&buf, nil))}
	t0 := time.Unix(1_700_000_000, 0)
	down := errors.New("dial tcp: connection refused")
	tr.note(t0, nil)
	for i := range 10 {
		tr.note(t0.Add(time.Duration(i)*500*time.Millisecond), down)
	}
	tr.note(t0.Add(5*time.Second), nil)
	tr.note(t0.Add(6*time.Second), nil)
	tr.note(t0.Add(7*time.Second), down)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if assert.Len(t, lines, 3, buf.String()) {
		assert.Contains(t, lines[0], "level=WARN")
		assert.Contains(t, lines[0], "connection refused")
		assert.Contains(t, lines[1], "level=INFO")
		assert.Contains(t, lines[1], "failed_for=5s failed_rounds=10")
		assert.Contains(t, lines[2], "level=WARN", "a new outage is logged again")
	}
}
