package server_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// reportBatchSizes are the batches BenchmarkReportBatchPath sends: the
// bench's batched phase (16), a mirror's flush of a process using about
// 250 connections (256), and the most one ReportBatch carries (512, a
// flush of a process using more).
var reportBatchSizes = []int{16, 256, 512}

// BenchmarkReportBatchPath is the server's CPU per ReportBatch and per
// report in it (decision 0065), in the child process of BenchmarkRPCPath,
// over HTTP/1.1 (the clients' transport for unary calls, decision 0052),
// for two servers on the same real Redis:
//
//   - cooldownd: no coalescing, so each report is applied by its own
//     script under its derived key;
//   - coalescing: coalescing (decision 0054), the replicas a flush is
//     meant for: the successes of connections the replica has learned
//     healthy are held, and Redis sees the batch's claim. Its interval
//     outlasts the run: the flush (one batch per connection and interval,
//     whatever the reports) is not in these figures.
//
// Each round sends 65,536 reports in keyed ReportBatches of one size from
// 16 workers (the same connections in every batch, at the revision their
// first answer gave), so that rounds of every size carry the same reports.
// Reported per size and server: <size>/<server>-µs-per-batch, -µs-per-report
// and -allocs-per-report. Run it with:
//
//	go test ./internal/server -run='^$' -bench=BenchmarkReportBatchPath -benchtime=3x
func BenchmarkReportBatchPath(b *testing.B) {
	child := startRPCChild(b)
	hc := rpcHTTPClient("http1")
	b.Cleanup(hc.CloseIdleConnections)
	targets := []string{"cooldownd", "coalescing"}
	const conc, reports = 16, 65536
	var keys atomic.Int64
	type load struct {
		rpc   cooldownv1connect.CooldownServiceClient
		batch []*cooldownv1.ReportRequest
	}
	loads := map[string]load{}
	for _, size := range reportBatchSizes {
		batch := make([]*cooldownv1.ReportRequest, size)
		for i := range batch {
			id := make([]byte, 32)
			id[0], id[1], id[2], id[3] = 0xba, byte(size>>8), byte(i>>8), byte(i)
			batch[i] = &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id, Label: "bench"},
				Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200}
		}
		for _, t := range targets {
			rpc := cooldownv1connect.NewCooldownServiceClient(hc, "http://"+child.addrs[t])
			// Warm up: the connections made, their revision learned, the
			// coalescing replica's entries learned healthy.
			for range 3 {
				resp, err := rpc.ReportBatch(context.Background(), connect.NewRequest(&cooldownv1.ReportBatchRequest{
					Reporter: "bench", IdempotencyKey: batchBenchKey(&keys), Reports: batch}))
				require.NoError(b, err)
				for i, a := range resp.Msg.GetReports() {
					batch[i].Revision = a.GetRevision()
				}
			}
			loads[fmt.Sprint(size, "/", t)] = load{rpc, batch}
		}
	}
	sum := map[string]rpcFigure{}
	b.ResetTimer()
	for range b.N {
		for _, size := range reportBatchSizes {
			for _, t := range targets {
				k := fmt.Sprint(size, "/", t)
				l := loads[k]
				calls := reports / size
				before := child.usage(b)
				var wg sync.WaitGroup
				var failed atomic.Pointer[error]
				var next atomic.Int64
				for range conc {
					wg.Go(func() {
						for next.Add(1) <= int64(calls) {
							_, err := l.rpc.ReportBatch(context.Background(), connect.NewRequest(&cooldownv1.ReportBatchRequest{
								Reporter: "bench", IdempotencyKey: batchBenchKey(&keys), Reports: l.batch}))
							if err != nil {
								failed.CompareAndSwap(nil, &err)
								return
							}
						}
					})
				}
				wg.Wait()
				if e := failed.Load(); e != nil {
					b.Fatal(*e)
				}
				after := child.usage(b)
				s := sum[k]
				sum[k] = rpcFigure{s.cpu + float64((after.CPU-before.CPU).Microseconds())/float64(calls),
					s.allocs + float64(after.Allocs-before.Allocs)/reports, s.bytes + float64(after.Bytes-before.Bytes)/reports}
			}
		}
	}
	b.StopTimer()
	n := float64(b.N)
	var lines []string
	for _, size := range reportBatchSizes {
		for _, t := range targets {
			k := fmt.Sprint(size, "/", t)
			f := sum[k]
			b.ReportMetric(f.cpu/n, k+"-µs-per-batch")
			b.ReportMetric(f.cpu/n/float64(size), k+"-µs-per-report")
			b.ReportMetric(f.allocs/n, k+"-allocs-per-report")
			lines = append(lines, fmt.Sprintf("%5d reports  %-10s %9.1f µs per batch  %6.2f µs per report  (%.0f allocs, %.0f B per report)",
				size, t, f.cpu/n, f.cpu/n/float64(size), f.allocs/n, f.bytes/n))
		}
	}
	// Printed, not logged: the testing package keeps ten lines of a
	// benchmark's log.
	fmt.Fprintf(os.Stderr, "server CPU per ReportBatch over HTTP/1.1 at c=%d, %d reports per round, %d rounds (load average %s):\n%s\n",
		conc, reports, b.N, loadAverage(), strings.Join(lines, "\n"))
}

// batchBenchKey is a fresh batch key (16 to 56 characters).
func batchBenchKey(n *atomic.Int64) string { return fmt.Sprintf("bench-batch-%016d", n.Add(1)) }
