package client

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// reportBatchTrace is testdata/report_batch.json, the mirror's flush as
// ReportBatch requests (decision 0065); clients/ts replays it too.
type reportBatchTrace struct {
	MaxRequestBytes int `json:"max_request_bytes"`
	Cases           []struct {
		Name       string `json:"name"`
		Server     string `json:"server"`
		LabelBytes int    `json:"label_bytes"` // 0: the client's default label
		Flushes    []struct {
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
			Answer      string     `json:"answer"`
			Queued      uint64     `json:"queued"`
			Warnings    []string   `json:"warnings"` // nil: not given, not checked
		} `json:"flushes"`
	} `json:"cases"`
}

// reportBatchFields are the fields a flush of report_batch.json may have
// (its comment): one the replay does not know is a typo, not a case.
var reportBatchFields = []string{"at_s", "successes", "connections", "batches", "reports", "batch_sizes", "answer", "queued", "warnings"}

// reportBatchCaseFields are the fields a case of report_batch.json may have.
var reportBatchCaseFields = []string{"name", "server", "label_bytes", "flushes"}

// traceLabel is the label of n bytes report_batch.json gives the
// connection name under label_bytes: the name, a space, then x repeated.
func traceLabel(name string, n int) string {
	return name + " " + strings.Repeat("x", n-len(name)-1)
}

var traceKey = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)

// resourceExhausted answers like a cooldownd at the tenant's connection cap.
func resourceExhausted(w http.ResponseWriter) bool {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte(`{"code":"resource_exhausted","message":"the tenant's connection cap is reached"}`))
	return true
}

// warnLog keeps the messages logged at warn level and above, in order.
type warnLog struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newWarnLog() warnLog { return warnLog{mu: new(sync.Mutex), msgs: new([]string)} }

func (l warnLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l warnLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.msgs = append(*l.msgs, r.Message)
	return nil
}
func (l warnLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l warnLog) WithGroup(string) slog.Handler      { return l }

// since returns the messages logged after the first n.
func (l warnLog) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string{}, (*l.msgs)[n:]...)
}

func (l warnLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(*l.msgs)
}

// TestReportBatchTrace replays testdata/report_batch.json against a real
// cooldownd (in-process), one that answers ReportBatch Unimplemented for
// "old", and a flush's requests ResourceExhausted where it says so: what
// each flush sends, queues and warns of.
func TestReportBatchTrace(t *testing.T) {
	t.Parallel()
	tr := readFixture[reportBatchTrace](t, "report_batch.json")
	require.NotEmpty(t, tr.Cases)
	// What cooldownd takes in one request: server.MaxRequestBytes (64 KiB),
	// which this module cannot import; the cooldownd below enforces it.
	require.Equal(t, 65536, tr.MaxRequestBytes, "max_request_bytes is server.MaxRequestBytes")
	raw := readFixture[struct {
		Cases []map[string]json.RawMessage `json:"cases"`
	}](t, "report_batch.json")
	for ci, tc := range raw.Cases {
		for k := range tc {
			require.Contains(t, reportBatchCaseFields, k, "case %d: unknown field", ci)
		}
		var flushes []map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(tc["flushes"], &flushes), "case %d", ci)
		for fi, f := range flushes {
			for k := range f {
				require.Contains(t, reportBatchFields, k, "case %d, flush %d: unknown field", ci, fi)
			}
		}
	}
	for _, tc := range tr.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, []string{"current", "old"}, tc.Server)
			require.NotEmpty(t, tc.Flushes)
			cd := startCooldownd(t, fastPolicy())
			var mu sync.Mutex
			start := time.Now()
			now := start
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			warns := newWarnLog()
			c := newClient(t, cd.URL, WithMirror(time.Hour), WithReporter("proc-trace"), withClock(clock), WithLogger(slog.New(warns)))
			old := tc.Server == "old"
			var capped atomic.Bool // this flush's requests are answered ResourceExhausted (an old cooldownd's ReportBatch Unimplemented first)
			reports, batches := recordReports(t, cd, func(w http.ResponseWriter, _ *http.Request, batch bool) bool {
				return old && batch && unimplemented(w) || capped.Load() && resourceExhausted(w)
			})
			names := map[ID]string{}
			named := func(name string) Conn {
				label := ""
				if tc.LabelBytes > 0 {
					label = traceLabel(name, tc.LabelBytes)
				}
				cn, err := c.Connection("openai", "https://api.example.com/v1", "key-"+name, "", label)
				require.NoError(t, err)
				if tc.LabelBytes > 0 {
					require.Len(t, cn.Label(), tc.LabelBytes, "label_bytes")
				}
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
				require.Contains(t, []string{"", "resource_exhausted"}, f.Answer, "at %d s", f.AtS)
				mu.Lock()
				now = start.Add(time.Duration(f.AtS) * time.Second)
				mu.Unlock()
				q0, w0 := c.Stats().Reports.Queued, warns.len()
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
				// The client's flush: the mirror's, then the report queue's
				// until empty, so that a request queued is resent here.
				capped.Store(f.Answer == "resource_exhausted")
				require.NoError(t, c.Flush(t.Context()))
				capped.Store(false)
				gotB, gotR := batches()[nb:], reports()[nr:]
				for i, b := range gotB {
					assert.LessOrEqual(t, proto.Size(b), tr.MaxRequestBytes, "ReportBatch %d at %d s: encoded size", i, f.AtS)
				}
				assert.Equal(t, f.Queued, c.Stats().Reports.Queued-q0, "requests queued at %d s", f.AtS)
				if f.Warnings != nil { // given, [] included
					assert.Equal(t, f.Warnings, warns.since(w0), "warnings logged at %d s", f.AtS)
				}
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
