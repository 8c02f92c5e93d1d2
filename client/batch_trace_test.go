package client

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// reportBatchTrace is testdata/report_batch.json, the mirror's flush as
// ReportBatch requests (decision 0065); clients/ts replays it too.
type reportBatchTrace struct {
	Cases []struct {
		Name    string `json:"name"`
		Server  string `json:"server"`
		Flushes []struct {
			AtS       int `json:"at_s"`
			Successes []struct {
				Conn  string `json:"conn"`
				Count int    `json:"count"`
				Retry bool   `json:"retry"`
			} `json:"successes"`
			Connections int        `json:"connections"`
			Batches     [][]string `json:"batches"`
			Reports     []string   `json:"reports"`
			BatchSizes  []int      `json:"batch_sizes"`
		} `json:"flushes"`
	} `json:"cases"`
}

var traceKey = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)

// TestReportBatchTrace replays testdata/report_batch.json against a real
// cooldownd (in-process), one that answers ReportBatch Unimplemented for
// "old": what each flush sends.
func TestReportBatchTrace(t *testing.T) {
	t.Parallel()
	tr := readFixture[reportBatchTrace](t, "report_batch.json")
	require.NotEmpty(t, tr.Cases)
	for _, tc := range tr.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			cd := startCooldownd(t, fastPolicy())
			var mu sync.Mutex
			start := time.Now()
			now := start
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			c := newClient(t, cd.URL, WithMirror(time.Hour), WithReporter("proc-trace"), withClock(clock))
			old := tc.Server == "old"
			reports, batches := recordReports(t, cd, func(w http.ResponseWriter, _ *http.Request, batch bool) bool { return old && batch && unimplemented(w) })
			names := map[ID]string{}
			named := func(name string) Conn {
				cn := conn(t, c, "https://api.example.com/v1", "key-"+name, "")
				names[cn.id] = name
				return cn
			}
			line := func(r *cooldownv1.ReportRequest) string {
				id, err := idFromBytes(r.GetConnection().GetId())
				require.NoError(t, err)
				s := fmt.Sprintf("%s ×%d", names[id], r.GetCount())
				if r.GetRetry() {
					s += " retry"
				}
				return s
			}
			for _, f := range tc.Flushes {
				mu.Lock()
				now = start.Add(time.Duration(f.AtS) * time.Second)
				mu.Unlock()
				for _, s := range f.Successes {
					cn := named(s.Conn)
					for range s.Count {
						c.mirror.add(cn, 0, s.Retry)
					}
				}
				for i := range f.Connections {
					c.mirror.add(named(fmt.Sprint("n", i)), 0, false)
				}
				nb, nr := len(batches()), len(reports())
				c.mirror.flush(t.Context())
				gotB, gotR := batches()[nb:], reports()[nr:]
				if f.BatchSizes != nil {
					var sizes []int
					for _, b := range gotB {
						sizes = append(sizes, len(b.GetReports()))
					}
					slices.Sort(sizes)
					slices.Reverse(sizes)
					assert.Equal(t, f.BatchSizes, sizes, "at %d s", f.AtS)
					assert.Empty(t, gotR, "no Report at %d s", f.AtS)
					continue
				}
				var wantB, haveB [][]string
				for _, b := range f.Batches {
					wantB = append(wantB, slices.Sorted(slices.Values(b)))
				}
				for _, b := range gotB {
					assert.Regexp(t, traceKey, b.GetIdempotencyKey())
					assert.Equal(t, "proc-trace", b.GetReporter())
					var ls []string
					for _, r := range b.GetReports() {
						assert.Empty(t, r.GetIdempotencyKey())
						assert.Empty(t, r.GetReporter())
						ls = append(ls, line(r))
					}
					haveB = append(haveB, slices.Sorted(slices.Values(ls)))
				}
				assert.Equal(t, wantB, haveB, "ReportBatch requests at %d s", f.AtS)
				var haveR []string
				for _, r := range gotR {
					assert.Regexp(t, traceKey, r.GetIdempotencyKey())
					assert.Equal(t, "proc-trace", r.GetReporter())
					haveR = append(haveR, line(r))
				}
				assert.Equal(t, slices.Sorted(slices.Values(f.Reports)), slices.Sorted(slices.Values(haveR)), "Report requests at %d s", f.AtS)
			}
		})
	}
}
