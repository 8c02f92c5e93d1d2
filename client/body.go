package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
)

// ReadErrorBody reads at most limit bytes of resp.Body and closes it. It
// asks the body for no more than limit bytes in total and never buffers more,
// so a huge error page costs at most limit bytes of memory. A body longer
// than limit is truncated without error. The body is not drained past limit:
// reading an unbounded body to reuse one connection costs more than a new
// connection (a body that fits is read to EOF, so its connection is reused).
//
// When ctx ends while the body stalls, the body is closed, which unblocks the
// read; ReadErrorBody then returns what it read so far and an error that
// wraps ctx.Err(). A nil resp or body, or limit ≤ 0, yields (nil, nil).
func ReadErrorBody(ctx context.Context, resp *http.Response, limit int64) ([]byte, error) {
	if resp == nil || resp.Body == nil {
		return nil, nil
	}
	closeBody := sync.OnceValue(resp.Body.Close)
	defer closeBody() // a close error after the read changes nothing
	if limit <= 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read error body: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = closeBody() })
	defer stop()

	limit = min(limit, math.MaxInt32)
	buf := make([]byte, 0, min(limit, 512))
	for zeroReads := 0; int64(len(buf)) < limit; {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(limit, 2*int64(cap(buf))))
			copy(grown, buf)
			buf = grown
		}
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case errors.Is(err, io.EOF):
			return buf, nil
		case err != nil && ctx.Err() != nil:
			return buf, fmt.Errorf("read error body: %w", ctx.Err())
		case err != nil:
			return buf, fmt.Errorf("read error body: %w", err)
		case n == 0:
			if zeroReads++; zeroReads >= 100 {
				return buf, fmt.Errorf("read error body: %w", io.ErrNoProgress)
			}
		default:
			zeroReads = 0
		}
	}
	return buf, nil
}

// quotaCodes are the error type/code values that mean the account's quota
// or balance is exhausted, not a momentary rate limit.
var quotaCodes = map[string]bool{
	"insufficient_quota":         true, // OpenAI, and the many OpenAI-compatible APIs
	"billing_hard_limit_reached": true, // OpenAI
	"billing_not_active":         true, // OpenAI
	"billing_error":              true, // Anthropic (HTTP 402)
	"credit_balance_exhausted":   true,
	"credit_balance_too_low":     true,
	"insufficient_balance":       true, // DeepSeek (HTTP 402), Moonshot
	"insufficient_credits":       true, // OpenRouter (HTTP 402)
	"payment_required":           true,
}

// errorInfo is what an error body says, reduced to short machine codes.
type errorInfo struct {
	typ, code, status string // sanitized error.type, error.code (if a string), error.status
	quota             string // the quota code found, or ""
}

// errorCode is the most specific machine code of the body: a non-numeric
// error.code (OpenAI "rate_limit_exceeded" beats type "requests"), else
// error.type (Anthropic), else error.status (Gemini "resource_exhausted").
func (i errorInfo) errorCode() string {
	switch {
	case i.quota != "":
		return i.quota
	case i.code != "" && strings.Trim(i.code, "0123456789") != "":
		return i.code
	case i.typ != "":
		return i.typ
	}
	return i.status
}

// says reports whether error.type or error.code contains sub.
func (i errorInfo) says(sub string) bool {
	return strings.Contains(i.typ, sub) || strings.Contains(i.code, sub)
}

// utf8BOM is the byte-order mark a JSON text may start with (RFC 8259 §8.1).
var utf8BOM = []byte("\xEF\xBB\xBF")

// parseErrorBody reads an error body. A JSON body is read for error.type,
// error.code and error.status only (string values; a number never names an
// error: Gemini's numeric code is its HTTP status), in any of the shapes
// {"error":{...}}, {"type":"error","error":{...}} (Anthropic) and
// [{"error":{...}}] (Gemini streams); message texts are never used. A
// leading UTF-8 byte-order mark is dropped, as RFC 8259 §8.1 lets a parser
// do and as the TypeScript client's TextDecoder does, and so is the JSON
// whitespace (space, tab, CR, LF) around the text, nothing else. A body
// that is not JSON (an HTML page, plain text, a truncated JSON body) only
// counts as a quota error when it holds the exact token insufficient_quota.
func parseErrorBody(body []byte) errorInfo {
	body = bytes.Trim(bytes.TrimPrefix(body, utf8BOM), " \t\r\n")
	if len(body) == 0 {
		return errorInfo{}
	}
	if !json.Valid(body) {
		if hasToken(body, "insufficient_quota") {
			return errorInfo{quota: "insufficient_quota"}
		}
		return errorInfo{}
	}
	type envelope struct {
		Error json.RawMessage `json:"error"`
	}
	var env envelope
	if body[0] == '[' {
		var list []envelope
		if json.Unmarshal(body, &list) != nil || len(list) == 0 {
			return errorInfo{}
		}
		env = list[0]
	} else if json.Unmarshal(body, &env) != nil {
		return errorInfo{}
	}
	var fields struct {
		Type   json.RawMessage `json:"type"`
		Code   json.RawMessage `json:"code"`
		Status json.RawMessage `json:"status"`
	}
	if json.Unmarshal(env.Error, &fields) != nil {
		return errorInfo{}
	}
	info := errorInfo{
		typ:    sanitizeCode(jsonScalar(fields.Type)),
		code:   sanitizeCode(jsonScalar(fields.Code)),
		status: sanitizeCode(jsonScalar(fields.Status)),
	}
	for _, c := range [...]string{info.code, info.typ} {
		if quotaCodes[c] {
			info.quota = c
			break
		}
	}
	return info
}

// jsonScalar returns a JSON string's value; "" for anything else (numbers,
// null, objects, arrays, booleans). A number's text ("1e2", "429.0") would
// be read differently by a client that holds it as a double.
func jsonScalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// hasToken reports whether tok occurs in b with no letter, digit or '_' on
// either side.
func hasToken(b []byte, tok string) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(tok))
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(tok)
		if (start == 0 || !isWordByte(b[start-1])) && (end == len(b) || !isWordByte(b[end])) {
			return true
		}
		i = start + 1
	}
}

func isWordByte(c byte) bool {
	return isDigit(c) || c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// sanitizeCode lower-cases an ASCII machine code and returns it when it has
// 1 to 64 characters of [a-z0-9_.-]; anything else (free text, a message,
// a long value) yields "", so no response text ever leaves the process.
func sanitizeCode(s string) string {
	if len(s) == 0 || len(s) > 64 {
		return ""
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'A' <= c && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case ('a' <= c && c <= 'z') || isDigit(c) || c == '_' || c == '.' || c == '-':
		default:
			return ""
		}
	}
	return string(b)
}
