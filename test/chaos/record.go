package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
// ExtendLease and GetConnection a worker sends (Connect protocol, binary
// proto) into its history: the call line before sending, the answer line
// after, so that a process killed mid-call leaves its op as lost. With a
// seeded fault it also rewrites answers, as a buggy server would.
type recorder struct {
	base    http.RoundTripper
	process int
	fault   string
	ttl     time.Duration

	mu  sync.Mutex
	w   *history.Writer
	seq int64
}

func (r *recorder) write(o history.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.w.Write(o)
	_ = r.w.Flush() // a SIGKILL must not lose what was sent
}

// RoundTrip implements http.RoundTripper.
func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	method := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
	if method == "ReportBatch" {
		// The history records one report per RPC: answer as a cooldownd
		// without ReportBatch (404, Unimplemented), so that the client's
		// mirror sends each connection's batch as a Report (decision 0065).
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return &http.Response{StatusCode: http.StatusNotFound, Status: "404 Not Found", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("404 page not found")), Request: req}, nil
	}
	kind := map[string]history.Kind{"Admit": history.Admit, "Report": history.Report,
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
	op, ok := parseRequest(kind, body)
	if !ok {
		return r.base.RoundTrip(req)
	}
	r.mu.Lock()
	r.seq++
	op.ID = r.seq
	r.mu.Unlock()
	op.Process, op.Call = r.process, time.Now().UnixMilli()
	pending := op
	pending.Code = "lost"
	r.write(pending)

	resp, err := r.base.RoundTrip(req)
	op.Return = time.Now().UnixMilli()
	if err != nil {
		op.Code = "lost"
		r.write(op)
		return nil, err
	}
	raw, err := readBody(resp)
	if err != nil {
		op.Code = "lost"
		r.write(op)
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(raw, &e)
		op.Code = e.Code
		if op.Code == "" {
			op.Code = fmt.Sprintf("http_%d", resp.StatusCode)
		}
		if op.Code == "deadline_exceeded" || op.Code == "unavailable" || op.Code == "canceled" {
			op.Code = "lost" // the server may have applied it before it gave up
		}
		r.write(op)
		return rebuilt(resp, raw), nil
	}
	raw = r.answer(&op, kind, raw)
	r.write(op)
	return rebuilt(resp, raw), nil
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
		op.Conn, op.Revision, op.LeaseToken = connHex(m.GetConnection()), m.GetRevision(), m.GetLeaseToken()
		op.Outcome, op.RetryAfter = int(m.GetOutcome()), m.GetRetryAfter().AsDuration().Milliseconds()
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

// answer records an answer into op, rewriting it first under a seeded
// fault, and returns the bytes the client gets.
func (r *recorder) answer(op *history.Op, kind history.Kind, raw []byte) []byte {
	ms := func(t *timestamppb.Timestamp) int64 {
		if t == nil {
			return 0
		}
		return t.AsTime().UnixMilli()
	}
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
		if r.fault == "stale-accept" && !m.GetAccepted() && op.Outcome != int(breaker.OutcomeCanceled) {
			m.Accepted = true
			raw, _ = proto.Marshal(&m)
		}
		op.Res = history.Result{ServerTime: ms(m.GetServerTime()), Revision: m.GetRevision(), Phase: int(m.GetState()),
			Accepted: m.GetAccepted(), Changed: m.GetChanged(), NotReplicated: m.GetDurability() == cooldownv1.Durability_DURABILITY_NOT_REPLICATED}
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
