package server

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// ReportBatch's bounds (decision 0065).
const (
	// MaxBatchReports is the most reports one ReportBatch carries: so many
	// success reports of the largest connection (a 64-byte label), revision,
	// count and status the clients send, with the longest reporter and key,
	// are 64,636 bytes, within MaxRequestBytes (TestReportBatchOfTheMostFits).
	MaxBatchReports = 512
	// MaxBatchKeyLen is the longest batch key: a report of the batch that
	// is applied on its own is keyed <batch key>-<index>, which must stay
	// within MaxReportKeyLen.
	MaxBatchKeyLen = 56
	// batchAppliers is how many of a batch's reports applied on their own
	// go to the store at once.
	batchAppliers = 8
)

// batchReport is one parsed report of a batch.
type batchReport struct {
	c   store.Conn
	rep breaker.Report
}

// ReportBatch applies the successes one process counted on many
// connections (decision 0065). With coalescing on, the reports this
// replica may coalesce are held unkeyed, and one claim of the batch's key
// in Redis (Store.ClaimBatch) says which: a resend finds it, and is
// answered for those as the first send was, without counting them again.
// Every other report goes as a Report keyed <key>-<index>, whose own key
// counts it once however often the batch is sent. So a healthy fleet
// writes one claim per process and interval, not one key per report.
func (s cooldownService) ReportBatch(ctx context.Context, req *connect.Request[cooldownv1.ReportBatchRequest]) (*connect.Response[cooldownv1.ReportBatchResponse], error) {
	tenant := identity(ctx).Tenant
	rs, err := parseReportBatch(tenant, req.Msg)
	if err != nil {
		return nil, err
	}
	key := req.Msg.GetIdempotencyKey()
	held := s.holdable(rs)
	var replayed []bool
	if key != "" {
		// Claimed even when nothing is held: a resend to a coalescing
		// replica must not hold what this send applies on its own.
		first, found, err := s.store.ClaimBatch(ctx, tenant, key, batchClaim(req.Msg.GetReporter(), rs, held))
		if err != nil {
			return nil, s.storeError(ctx, "report batch", err)
		}
		if found {
			if replayed, err = claimHeld(first, req.Msg.GetReporter(), rs); err != nil {
				return nil, err
			}
			held = nil
		}
	}
	out := make([]*cooldownv1.ReportResponse, len(rs))
	now := s.now()
	var alone []int
	for i, r := range rs {
		switch {
		case i < len(replayed) && replayed[i]:
			// The first send held it: answered as then, counted then.
			out[i] = heldAnswer(r.rep.Revision, now)
		case i < len(held) && held[i]:
			if resp, ok, _ := s.coalesce.take(r.c, r.rep, now); ok { // unkeyed: never a reused key
				s.metrics.report(r.rep.Outcome, true)
				out[i] = resp
				continue
			}
			// No longer coalesced (a failure came in meanwhile): the claim
			// says held, so this is its one application.
			alone = append(alone, i)
		default:
			alone = append(alone, i)
		}
	}
	if err := s.applyAlone(ctx, key, rs, alone, out); err != nil {
		return nil, err
	}
	return connect.NewResponse(&cooldownv1.ReportBatchResponse{Reports: out}), nil
}

// applyAlone applies the reports of rs at idx each as a Report keyed
// <key>-<index> (unkeyed without a batch key), batchAppliers at a time,
// into out. The first error is returned once all are done: the client
// sends the batch again, and the keys count each report once.
func (s cooldownService) applyAlone(ctx context.Context, key string, rs []batchReport, idx []int, out []*cooldownv1.ReportResponse) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, batchAppliers)
	for _, i := range idx {
		c := rs[i].c
		if key != "" {
			c.ReportKey = key + "-" + strconv.Itoa(i)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := s.report(ctx, c, rs[i].rep)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			out[i] = resp
		})
	}
	wg.Wait()
	return first
}

// holdable says which of rs this replica may coalesce now (nil when it
// does not coalesce).
func (s cooldownService) holdable(rs []batchReport) []bool {
	if s.coalesce == nil {
		return nil
	}
	held := make([]bool, len(rs))
	for i, r := range rs {
		held[i] = s.coalesce.holdable(r.c, r.rep)
	}
	return held
}

// parseReportBatch checks a batch and returns its reports, each with the
// batch's reporter and no key of its own.
func parseReportBatch(tenant string, m *cooldownv1.ReportBatchRequest) ([]batchReport, error) {
	n := len(m.GetReports())
	if n == 0 || n > MaxBatchReports {
		return nil, errInvalid("reports", "must hold 1 to %d reports, got %d", MaxBatchReports, n)
	}
	if err := checkReportKey("idempotency_key", m.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	if len(m.GetIdempotencyKey()) > MaxBatchKeyLen {
		return nil, errInvalid("idempotency_key", "must be at most %d characters in a batch, got %d", MaxBatchKeyLen, len(m.GetIdempotencyKey()))
	}
	if err := checkReporter("reporter", m.GetReporter()); err != nil {
		return nil, err
	}
	type one struct {
		id    keys.ID
		rev   uint64
		retry bool
	}
	seen := make(map[one]struct{}, n)
	rs := make([]batchReport, n)
	for i, r := range m.GetReports() {
		field := fmt.Sprintf("reports[%d]", i)
		switch {
		case r.GetOutcome() != cooldownv1.Outcome_OUTCOME_SUCCESS:
			return nil, errInvalid(field+".outcome", "must be OUTCOME_SUCCESS in a batch")
		case r.GetLeaseToken() != "":
			return nil, errInvalid(field+".lease_token", "must be empty in a batch: a probe's report goes alone")
		case r.GetRetryAfter() != nil:
			return nil, errInvalid(field+".retry_after", "must be empty in a batch: a hint goes alone")
		case r.GetReporter() != "" || r.GetIdempotencyKey() != "":
			return nil, errInvalid(field, "reporter and idempotency_key must be empty: the batch's apply")
		}
		c, rep, err := parseReport(tenant, r)
		if err != nil {
			return nil, prefixed(field, err)
		}
		rep.Reporter = m.GetReporter()
		k := one{c.ID, rep.Revision, rep.Retry}
		if _, dup := seen[k]; dup {
			return nil, errInvalid(field, "repeats a connection, revision and retry flag of the batch: add their counts")
		}
		seen[k] = struct{}{}
		rs[i] = batchReport{c, rep}
	}
	return rs, nil
}

// prefixed is a report's validation error, named as a batch's field: the
// field of its BadRequest detail (errInvalid's) under field.
func prefixed(field string, err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		return err
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if br, ok := v.(*errdetails.BadRequest); derr == nil && ok && len(br.GetFieldViolations()) > 0 {
			fv := br.GetFieldViolations()[0]
			return errInvalid(field+"."+fv.GetField(), "%s", fv.GetDescription())
		}
	}
	return errInvalid(field, "%s", ce.Message())
}

// batchClaim is what a batch's key remembers: the digest of what the
// batch says (its reporter, and each report's connection, revision,
// count, retry flag, status and code) and which reports this send held,
// as hex: "<digest>:<bitmap>".
func batchClaim(reporter string, rs []batchReport, held []bool) string {
	bits := make([]byte, (len(rs)+7)/8)
	for i := range rs {
		if i < len(held) && held[i] {
			bits[i/8] |= 1 << (i % 8)
		}
	}
	return batchDigest(reporter, rs) + ":" + hex.EncodeToString(bits)
}

// claimHeld reads the first send's claim of a batch: which reports it
// held. A claim of another batch is a key reused.
func claimHeld(claim, reporter string, rs []batchReport) ([]bool, error) {
	digest, bitsHex, ok := strings.Cut(claim, ":")
	bits, err := hex.DecodeString(bitsHex)
	if !ok || err != nil || digest != batchDigest(reporter, rs) || len(bits) != (len(rs)+7)/8 {
		return nil, errInvalid("idempotency_key", "names a different batch already applied: send a new key with each batch")
	}
	held := make([]bool, len(rs))
	for i := range rs {
		held[i] = bits[i/8]&(1<<(i%8)) != 0
	}
	return held, nil
}

// batchDigest is 16 bytes of SHA-256 over what a batch counts, in hex.
func batchDigest(reporter string, rs []batchReport) string {
	h := sha256.New()
	var b [8]byte
	word := func(v uint64) { binary.BigEndian.PutUint64(b[:], v); h.Write(b[:]) }
	text := func(s string) { word(uint64(len(s))); h.Write([]byte(s)) }
	text(reporter)
	word(uint64(len(rs)))
	for _, r := range rs {
		h.Write(r.c.ID[:])
		word(r.rep.Revision)
		word(uint64(r.rep.Count))
		retry := uint64(0)
		if r.rep.Retry {
			retry = 1
		}
		word(retry)
		word(uint64(r.rep.HTTPStatus))
		text(r.rep.ErrorCode)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
