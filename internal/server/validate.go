package server

import (
	"fmt"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/keys"
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
		return keys.ID{}, errInvalid(field, "must be exactly 32 bytes, got %d", len(b))
	}
	return id, nil
}

func parseConn(field string, c *cooldownv1.Connection) (keys.ID, string, error) {
	if c == nil {
		return keys.ID{}, "", errInvalid(field, "is required")
	}
	id, err := parseID(field+".id", c.GetId())
	if err != nil {
		return id, "", err
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

func checkText(field, s string, maxLen int) error {
	if len(s) > maxLen || !utf8.ValidString(s) {
		return errInvalid(field, "must be valid UTF-8 of at most %d bytes", maxLen)
	}
	return nil
}
