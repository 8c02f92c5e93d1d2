package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/test/chaos/history"
)

// recorder is an http.RoundTripper that records every Admit, Report,
// ReportBatch, ExtendLease and GetConnection a worker sends (Connect
// protocol, binary proto) into its history: the call line before sending,
// the answer line after, so that a process killed mid-call leaves its op
// as lost. A ReportBatch is one Report op per entry (see parseBatch). With
// a seeded fault it also rewrites answers, as a buggy server would.
type recorder struct {
	base    http.RoundTripper
	process int
	fault   string
	ttl     time.Duration

	mu  sync.Mutex
	w   *history.Writer
	seq int64
}

// write appends ops, and flushes: a SIGKILL must not lose what was sent.
func (r *recorder) write(ops []history.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range ops {
		_ = r.w.Write(o)
	}
	_ = r.w.Flush()
}

// RoundTrip implements http.RoundTripper.
func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	method := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
	kind := map[string]history.Kind{"Admit": history.Admit, "Report": history.Report, "ReportBatch": history.Report,
		"ExtendLease": history.Extend, "GetConnection": history.Get}[method]
	if kind == "" || req.Body == nil {
		return r.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	batch := method == "ReportBatch"
	var ops []history.Op
	if batch {
		ops = parseBatch(body)
	} else if op, ok := parseRequest(kind, body); ok {
		ops = []history.Op{op}
	}
	if len(ops) == 0 {
		return r.base.RoundTrip(req)
	}
	call := time.Now().UnixMilli()
	r.mu.Lock()
	for i := range ops {
		r.seq++
		ops[i].ID, ops[i].Process, ops[i].Call = r.seq, r.process, call
	}
	r.mu.Unlock()
	r.write(withCode(ops, "lost"))

	resp, err := r.base.RoundTrip(req)
	ret := time.Now().UnixMilli()
	for i := range ops {
		ops[i].Return = ret
	}
	if err != nil {
		r.write(withCode(ops, "lost"))
		return nil, err
	}
	raw, err := readBody(resp)
	if err != nil {
		r.write(withCode(ops, "lost"))
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(raw, &e)
		code := e.Code
		if code == "" {
			code = fmt.Sprintf("http_%d", resp.StatusCode)
		}
		if code == "deadline_exceeded" || code == "unavailable" || code == "canceled" {
			code = "lost" // the server may have applied it before it gave up
		}
		r.write(withCode(ops, code))
		return rebuilt(resp, raw), nil
	}
	if batch {
		raw = r.answerBatch(ops, raw)
	} else {
		raw = r.answer(&ops[0], kind, raw)
	}
	r.write(ops)
	return rebuilt(resp, raw), nil
}

// withCode returns a copy of ops, each with code.
func withCode(ops []history.Op, code string) []history.Op {
	out := slices.Clone(ops)
	for i := range out {
		out[i].Code = code
	}
	return out
}

func readBody(resp *http.Response) ([]byte, error) {
	defer func() { _ = resp.Body.Close() }()
	var rd io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, err
		}
		rd = zr
	}
	return io.ReadAll(rd)
}

func rebuilt(resp *http.Response, raw []byte) *http.Response {
	resp.Header.Del("Content-Encoding")
	resp.Header.Set("Content-Length", fmt.Sprint(len(raw)))
	resp.ContentLength = int64(len(raw))
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return resp
}

func connHex(c *cooldownv1.Connection) string {
	id, err := keys.IDFromBytes(c.GetId())
	if err != nil {
		return ""
	}
	return id.String()
}

// parseRequest records a request's fields; single-candidate Admits only
// (a multi-candidate Admit is several decisions, not one op).
func parseRequest(kind history.Kind, body []byte) (history.Op, bool) {
	op := history.Op{Kind: kind}
	switch kind {
	case history.Admit:
		var m cooldownv1.AdmitRequest
		if proto.Unmarshal(body, &m) != nil || len(m.GetCandidates()) != 1 {
			return op, false
		}
		op.Conn = connHex(m.GetCandidates()[0])
	case history.Report:
		var m cooldownv1.ReportRequest
		if proto.Unmarshal(body, &m) != nil {
			return op, false
		}
		op = reportOp(&m)
		op.Reporter, op.Key = m.GetReporter(), m.GetIdempotencyKey()
	case history.Extend:
		var m cooldownv1.ExtendLeaseRequest
		if proto.Unmarshal(body, &m) != nil {
			return op, false
		}
		op.Conn, op.LeaseToken, op.TTL = connHex(m.GetConnection()), m.GetLeaseToken(), m.GetTtl().AsDuration().Milliseconds()
	case history.Get:
		var m cooldownv1.GetConnectionRequest
		if proto.Unmarshal(body, &m) != nil {
			return op, false
		}
		id, err := keys.IDFromBytes(m.GetId())
		if err != nil {
			return op, false
		}
		op.Conn = id.String()
	}
	return op, op.Conn != ""
}

// ms is t in Unix milliseconds, 0 for none.
func ms(t *timestamppb.Timestamp) int64 {
	if t == nil {
		return 0
	}
	return t.AsTime().UnixMilli()
}

// answer records an answer into op, rewriting it first under a seeded
// fault, and returns the bytes the client gets.
func (r *recorder) answer(op *history.Op, kind history.Kind, raw []byte) []byte {
	switch kind {
	case history.Admit:
		var m cooldownv1.AdmitResponse
		if proto.Unmarshal(raw, &m) != nil {
			op.Code = "malformed"
			return raw
		}
		if r.fault == "double-probe" && m.GetDenyReason() == cooldownv1.DenyReason_DENY_REASON_PROBE_IN_FLIGHT {
			now := m.GetServerTime().AsTime()
			m.Decision, m.DenyReason, m.RetryAfter, m.AvailableAt = cooldownv1.Decision_DECISION_ALLOW_PROBE, 0, nil, nil
			m.LeaseToken = breaker.LeaseToken(m.GetRevision(), 0, now.UnixMilli(), "seeded")
			m.LeaseExpiresAt = timestamppb.New(now.Add(r.ttl))
			raw, _ = proto.Marshal(&m)
		}
		op.Res = history.Result{ServerTime: ms(m.GetServerTime()), Decision: int(m.GetDecision()), Reason: int(m.GetDenyReason()),
			RetryAfter: m.GetRetryAfter().AsDuration().Milliseconds(), AvailAt: ms(m.GetAvailableAt()), Revision: m.GetRevision(),
			Phase: int(m.GetState()), LeaseToken: m.GetLeaseToken(), LeaseExp: ms(m.GetLeaseExpiresAt()),
			NotReplicated: m.GetDurability() == cooldownv1.Durability_DURABILITY_NOT_REPLICATED}
		if m.GetRetryAfter() == nil {
			op.Res.RetryAfter = 0
		}
	case history.Report:
		var m cooldownv1.ReportResponse
		if proto.Unmarshal(raw, &m) != nil {
			op.Code = "malformed"
			return raw
		}
		if r.reportAnswer(op, &m) {
			raw, _ = proto.Marshal(&m)
		}
	case history.Extend:
		var m cooldownv1.ExtendLeaseResponse
		if proto.Unmarshal(raw, &m) != nil {
			op.Code = "malformed"
			return raw
		}
		ttl := op.TTL
		if ttl <= 0 {
			ttl = r.ttl.Milliseconds()
		}
		op.Res = history.Result{LeaseExp: ms(m.GetLeaseExpiresAt())}
		op.Res.ServerTime = op.Res.LeaseExp - ttl
	case history.Get:
		var m cooldownv1.GetConnectionResponse
		if proto.Unmarshal(raw, &m) != nil {
			op.Code = "malformed"
			return raw
		}
		c := m.GetConnection()
		op.Res = history.Result{Revision: c.GetRevision(), Phase: int(c.GetState()), Cause: int(c.GetCause()),
			OpenUntil: ms(c.GetOpenUntil()), Reopens: int(c.GetReopens()), Consecutive: int(c.GetConsecutiveFailures()),
			Probes: int(c.GetProbesInFlight()), Override: int(c.GetOverride())}
	}
	return raw
}

// reportAnswer records a report's answer into op, rewriting it first under
// a seeded fault; it reports whether it rewrote m.
func (r *recorder) reportAnswer(op *history.Op, m *cooldownv1.ReportResponse) bool {
	rewrote := false
	if r.fault == "stale-accept" && !m.GetAccepted() && op.Outcome != int(breaker.OutcomeCanceled) {
		m.Accepted, rewrote = true, true
	}
	op.Res = history.Result{ServerTime: ms(m.GetServerTime()), Revision: m.GetRevision(), Phase: int(m.GetState()),
		Accepted: m.GetAccepted(), Changed: m.GetChanged(), NotReplicated: m.GetDurability() == cooldownv1.Durability_DURABILITY_NOT_REPLICATED}
	return rewrote
}
