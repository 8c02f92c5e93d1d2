package server

import (
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// Input bounds.
const (
	MaxCandidates   = 16
	MaxLabelLen     = 64
	MaxErrorCodeLen = 64
	MaxReasonLen    = 256
	MaxHint         = 24 * time.Hour
	MaxPageSize     = 500
	DefaultPageSize = 100
	MaxRequestBytes = 64 << 10
	// MaxWatchesPerTenant and MaxWatches bound open WatchConnections
	// streams per replica (each tenant's watchers share one Redis
	// subscription, but every stream holds a goroutine and a buffer).
	MaxWatchesPerTenant = 100
	MaxWatches          = 2000
	// MaxLeaseTokenLen bounds a lease token sent back by a client.
	MaxLeaseTokenLen = 128
	// MaxHistoryLimit is the most transitions GetConnection returns.
	MaxHistoryLimit = 50
	// MaxBatch is the most successes one report may stand for.
	MaxBatch = 1_000_000
	// MinHTTPStatus and MaxHTTPStatus bound a reported HTTP status (0: none).
	MinHTTPStatus = 100
	MaxHTTPStatus = 999
	// MaxOverride is the longest timed override.
	MaxOverride = 30 * 24 * time.Hour
	// MaxReporterLen bounds a report's reporter id.
	MaxReporterLen = 64
	// MinReportKeyLen and MaxReportKeyLen bound a report's idempotency
	// key (at least 16 characters: about 96 random bits, so that two
	// reports of one connection never share a key by chance).
	MinReportKeyLen = 16
	MaxReportKeyLen = 64
)

// errInvalid builds an invalid_argument error naming the field: in its
// message ("field: description") and as a google.rpc.BadRequest detail
// with one field violation, which clients read without parsing text.
func errInvalid(field, format string, args ...any) error {
	desc := fmt.Sprintf(format, args...)
	err := connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", field, desc))
	if d, derr := connect.NewErrorDetail(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: desc}},
	}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

func parseID(field string, b []byte) (keys.ID, error) {
	id, err := keys.IDFromBytes(b)
	if err != nil {
		return keys.ID{}, errIDLength(field, b)
	}
	return id, nil
}

func errIDLength(field string, b []byte) error {
	return errInvalid(field, "must be exactly 32 bytes, got %d", len(b))
}

func parseConn(field string, c *cooldownv1.Connection) (keys.ID, string, error) {
	if c == nil {
		return keys.ID{}, "", errInvalid(field, "is required")
	}
	// The field's name is built only for an error: this runs for every
	// candidate of every Admit and every Report.
	id, err := keys.IDFromBytes(c.GetId())
	if err != nil {
		return keys.ID{}, "", errIDLength(field+".id", c.GetId())
	}
	if err := checkLabel(c.GetLabel()); err != nil {
		return id, "", errInvalid(field+".label", "%v", err)
	}
	return id, c.GetLabel(), nil
}

// parseHint bounds a client-sent duration to [0, MaxHint].
func parseHint(field string, d *durationpb.Duration) (int64, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, errInvalid(field, "is not a valid duration")
	}
	v := d.AsDuration()
	if v < 0 || v > MaxHint {
		return 0, errInvalid(field, "must be between 0 and %s", MaxHint)
	}
	return v.Milliseconds(), nil
}

// checkCode accepts short machine codes: [a-z0-9_.-]{0,64}.
func checkCode(field, s string) error {
	if len(s) > MaxErrorCodeLen {
		return errInvalid(field, "must be at most %d bytes", MaxErrorCodeLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return errInvalid(field, "must match [a-z0-9_.-]*")
		}
	}
	return nil
}

// candidateFields are the field names of Admit's candidates, built once
// rather than formatted on every request.
var candidateFields = func() (f [MaxCandidates]string) {
	for i := range f {
		f[i] = fmt.Sprintf("candidates[%d]", i)
	}
	return f
}()

// admitConns checks an Admit request and returns its candidates as the
// store takes them, each marked a retry as retry (parallel to the
// candidates) says; a missing entry is a first attempt.
func admitConns(tenant string, m *cooldownv1.AdmitRequest) ([]store.Conn, error) {
	cands, retry := m.GetCandidates(), m.GetRetry()
	if len(cands) < 1 || len(cands) > MaxCandidates {
		return nil, errInvalid("candidates", "must hold 1 to %d connections, got %d", MaxCandidates, len(cands))
	}
	if len(retry) > len(cands) {
		return nil, errInvalid("retry", "must hold at most as many entries as candidates (%d), got %d", len(cands), len(retry))
	}
	conns := make([]store.Conn, len(cands))
	for i, c := range cands {
		id, label, err := parseConn(candidateFields[i], c)
		if err != nil {
			return nil, err
		}
		conns[i] = store.Conn{Tenant: tenant, ID: id, Label: label, Retry: i < len(retry) && retry[i]}
	}
	return conns, nil
}

// parseReport checks a Report request and returns its connection and
// report as the store takes them.
func parseReport(tenant string, m *cooldownv1.ReportRequest) (store.Conn, breaker.Report, error) {
	id, label, err := parseConn("connection", m.GetConnection())
	if err != nil {
		return store.Conn{}, breaker.Report{}, err
	}
	o, retryAfter, err := checkReport(m)
	if err != nil {
		return store.Conn{}, breaker.Report{}, err
	}
	return store.Conn{Tenant: tenant, ID: id, Label: label, ReportKey: m.GetIdempotencyKey()}, breaker.Report{
		Revision: m.GetRevision(), LeaseToken: m.GetLeaseToken(), Outcome: o, RetryAfter: retryAfter,
		HTTPStatus: int(m.GetHttpStatus()), ErrorCode: m.GetErrorCode(), Count: int64(m.GetCount()),
		Retry: m.GetRetry(), Reporter: m.GetReporter(),
	}, nil
}

// checkReport checks a report's fields besides its connection, and
// returns its outcome and its retry_after hint (ms).
func checkReport(m *cooldownv1.ReportRequest) (breaker.Outcome, int64, error) {
	// Check the wire value before narrowing it: breaker.Outcome is a uint8,
	// so 257 would otherwise become SUCCESS.
	wo := m.GetOutcome()
	o := breaker.Outcome(wo)
	if wo < 0 || wo > math.MaxUint8 || !o.Valid() {
		return 0, 0, errInvalid("outcome", "must be one of the defined outcomes, got %d", wo)
	}
	retryAfter, err := parseHint("retry_after", m.GetRetryAfter())
	if err != nil {
		return 0, 0, err
	}
	if st := m.GetHttpStatus(); st != 0 && (st < MinHTTPStatus || st > MaxHTTPStatus) {
		return 0, 0, errInvalid("http_status", "must be 0 or an HTTP status code (%d-%d), got %d", MinHTTPStatus, MaxHTTPStatus, st)
	}
	if err := checkCode("error_code", m.GetErrorCode()); err != nil {
		return 0, 0, err
	}
	if len(m.GetLeaseToken()) > MaxLeaseTokenLen {
		return 0, 0, errInvalid("lease_token", "must be at most %d bytes", MaxLeaseTokenLen)
	}
	if n := m.GetCount(); n > 1 && (o != breaker.OutcomeSuccess || m.GetLeaseToken() != "" || n > MaxBatch) {
		return 0, 0, errInvalid("count", "above 1 only for a success without a lease token, at most %d; got %d", MaxBatch, n)
	}
	if err := checkReportKey("idempotency_key", m.GetIdempotencyKey()); err != nil {
		return 0, 0, err
	}
	return o, retryAfter, checkReporter("reporter", m.GetReporter())
}

// checkReportKey accepts a report's idempotency key: empty, or 16 to 64
// characters of [A-Za-z0-9_-] (base64url: the key is the last part of a
// Redis key inside the connection's hash tag, so it holds no brace).
func checkReportKey(field, s string) error {
	if s == "" {
		return nil
	}
	ok := len(s) >= MinReportKeyLen && len(s) <= MaxReportKeyLen
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return errInvalid(field, "must be empty or %d to %d characters of [A-Za-z0-9_-], got %d bytes", MinReportKeyLen, MaxReportKeyLen, len(s))
	}
	return nil
}

// checkReporter accepts a reporter id: empty, or 1 to 64 characters of
// [A-Za-z0-9._-] (random per client process; never echoed back, as a
// client may have put something else there).
func checkReporter(field, s string) error {
	ok := len(s) <= MaxReporterLen
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	if !ok {
		return errInvalid(field, "must be empty or 1 to %d characters of [A-Za-z0-9._-], got %d bytes", MaxReporterLen, len(s))
	}
	return nil
}

func checkText(field, s string, maxLen int) error {
	if len(s) > maxLen || !utf8.ValidString(s) {
		return errInvalid(field, "must be valid UTF-8 of at most %d bytes", maxLen)
	}
	return nil
}
