package server

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

func fuzzServer(f *testing.F) *Server {
	f.Helper()
	_, rdb := redistest.Mini(f)
	st, err := store.New(rdb, store.Options{})
	require.NoError(f, err)
	s, err := New(Options{Store: st})
	require.NoError(f, err)
	return s
}

func seedBytes(f *testing.F, m proto.Message) {
	b, err := proto.Marshal(m)
	require.NoError(f, err)
	f.Add(b)
}

// FuzzReportRequest decodes arbitrary bytes as a ReportRequest and runs the
// handler: it never panics, rejects with invalid_argument, and accepts only
// requests that are within bounds.
func FuzzReportRequest(f *testing.F) {
	s := fuzzServer(f)
	id := make([]byte, 32)
	seedBytes(f, &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id, Label: "openai gpt-4o"}, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS})
	seedBytes(f, &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id}, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: durationpb.New(1e9), HttpStatus: 429, ErrorCode: "rate_limit"})
	seedBytes(f, &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id[:31], Label: "sk-abc"}, Outcome: 99})
	seedBytes(f, &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id}, Outcome: cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, Retry: true, Reporter: "pod-1"})
	seedBytes(f, &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id}, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, Reporter: "a b/c"})
	svc := cooldownService{s}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m cooldownv1.ReportRequest
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		_, err := svc.Report(context.Background(), connect.NewRequest(&m))
		if err != nil {
			require.Contains(t, []connect.Code{connect.CodeInvalidArgument, connect.CodeResourceExhausted}, connect.CodeOf(err), "%v", err)
			return
		}
		require.Len(t, m.GetConnection().GetId(), 32)
		require.True(t, breaker.Outcome(m.GetOutcome()).Valid())
		require.NoError(t, checkLabel(m.GetConnection().GetLabel()))
		require.LessOrEqual(t, m.GetRetryAfter().AsDuration(), MaxHint)
		require.Regexp(t, `^[A-Za-z0-9._-]{0,64}$`, m.GetReporter())
	})
}

// FuzzAdmitRequest does the same for AdmitRequest.
func FuzzAdmitRequest(f *testing.F) {
	s := fuzzServer(f)
	id := make([]byte, 32)
	seedBytes(f, &cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: id, Label: "a"}, {Id: id}}})
	seedBytes(f, &cooldownv1.AdmitRequest{})
	seedBytes(f, &cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: id}}, Retry: []bool{true}})
	seedBytes(f, &cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: id}}, Retry: []bool{true, false}})
	svc := cooldownService{s}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m cooldownv1.AdmitRequest
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		res, err := svc.Admit(context.Background(), connect.NewRequest(&m))
		if err != nil {
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
			return
		}
		n := len(m.GetCandidates())
		require.True(t, n >= 1 && n <= MaxCandidates)
		require.Less(t, int(res.Msg.GetCandidateIndex()), n)
		require.LessOrEqual(t, len(m.GetRetry()), n)
	})
}

// FuzzMergeRequest: PeerService's Merge refuses what is out of bounds
// (InvalidArgument) and never panics; what a coalescing replica takes is
// within them: valid tenants and ids, keys of the report-key alphabet,
// counts in range, and a pending keyed count that matches what it took.
func FuzzMergeRequest(f *testing.F) {
	s := fuzzServer(f)
	s.StartCoalescing(time.Hour)
	id := make([]byte, 32)
	pc := &cooldownv1.PeerConnection{Tenant: "default", Id: id, Label: "openai gpt-4o"}
	seedBytes(f, &cooldownv1.MergeRequest{Batches: []*cooldownv1.PeerBatch{{Connection: pc, Revision: 3, Count: 40, HttpStatus: 200}}})
	seedBytes(f, &cooldownv1.MergeRequest{Batches: []*cooldownv1.PeerBatch{{Connection: pc, Retry: true,
		Keyed: []*cooldownv1.PeerKeyedCount{{Key: "process-01-batch-0001", Count: 3}, {Key: "process-01-batch-0001", Count: 3}}}}})
	seedBytes(f, &cooldownv1.MergeRequest{Batches: []*cooldownv1.PeerBatch{{Connection: &cooldownv1.PeerConnection{Tenant: "a b", Id: id[:31]}, Count: -1}}})
	seedBytes(f, &cooldownv1.MergeRequest{Batches: []*cooldownv1.PeerBatch{{Connection: pc, Keyed: []*cooldownv1.PeerKeyedCount{{Key: "short", Count: 0}}}}})
	svc := peerService{s}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m cooldownv1.MergeRequest
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		before := s.coalesce.keyed
		res, err := svc.Merge(context.Background(), connect.NewRequest(&m))
		if err != nil {
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
			return
		}
		require.Len(t, res.Msg.GetAccepted(), len(m.GetBatches()))
		took := 0
		for i, b := range m.GetBatches() {
			require.NoError(t, keys.ValidateTenant(b.GetConnection().GetTenant()))
			require.Len(t, b.GetConnection().GetId(), 32)
			require.NoError(t, checkLabel(b.GetConnection().GetLabel()))
			for _, kc := range b.GetKeyed() {
				require.Regexp(t, `^[A-Za-z0-9_-]{16,64}$`, kc.GetKey())
				require.True(t, kc.GetCount() >= 1 && kc.GetCount() <= MaxBatch)
			}
			if res.Msg.GetAccepted()[i] {
				took += len(b.GetKeyed())
			}
		}
		require.Equal(t, before+took, s.coalesce.keyed)
		s.coalesce.flush(context.Background(), s.now) // start empty again
	})
}

// FuzzReportBatchRequest decodes arbitrary bytes as a ReportBatchRequest
// and runs the handler, coalescing: it never panics, rejects with
// invalid_argument, and accepts only batches within bounds, answering
// each report.
func FuzzReportBatchRequest(f *testing.F) {
	s := fuzzServer(f)
	s.StartCoalescing(time.Hour)
	id, other := make([]byte, 32), make([]byte, 32)
	other[0] = 1
	ok := func(id []byte, count uint32) *cooldownv1.ReportRequest {
		return &cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: id, Label: "openai gpt-4o"}, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, Count: count, HttpStatus: 200}
	}
	seedBytes(f, &cooldownv1.ReportBatchRequest{Reports: []*cooldownv1.ReportRequest{ok(id, 3), ok(other, 1)}, Reporter: "pod-1", IdempotencyKey: "batch-key-0123456789ab"})
	seedBytes(f, &cooldownv1.ReportBatchRequest{Reports: []*cooldownv1.ReportRequest{ok(id, 3), ok(id, 1)}})
	seedBytes(f, &cooldownv1.ReportBatchRequest{Reports: []*cooldownv1.ReportRequest{{Connection: &cooldownv1.Connection{Id: id}, Outcome: cooldownv1.Outcome_OUTCOME_RATE_LIMITED}}})
	seedBytes(f, &cooldownv1.ReportBatchRequest{Reports: []*cooldownv1.ReportRequest{{Connection: &cooldownv1.Connection{Id: id[:31]}, IdempotencyKey: "k"}}, IdempotencyKey: "short"})
	svc := cooldownService{s}
	ctx := context.WithValue(context.Background(), identityKey{}, Identity{Tenant: keys.DefaultTenant})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m cooldownv1.ReportBatchRequest
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		res, err := svc.ReportBatch(ctx, connect.NewRequest(&m))
		if err != nil {
			require.Contains(t, []connect.Code{connect.CodeInvalidArgument, connect.CodeResourceExhausted}, connect.CodeOf(err), "%v", err)
			return
		}
		require.Len(t, res.Msg.GetReports(), len(m.GetReports()))
		require.LessOrEqual(t, len(m.GetReports()), MaxBatchReports)
		require.LessOrEqual(t, len(m.GetIdempotencyKey()), MaxBatchKeyLen)
		for i, r := range m.GetReports() {
			require.Equal(t, cooldownv1.Outcome_OUTCOME_SUCCESS, r.GetOutcome())
			require.Len(t, r.GetConnection().GetId(), 32)
			require.Empty(t, r.GetLeaseToken())
			require.Empty(t, r.GetIdempotencyKey())
			require.NotNil(t, res.Msg.GetReports()[i])
		}
	})
}
