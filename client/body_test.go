package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingBody is an endless body of 'x' that counts the bytes it hands out
// and records whether it was closed.
type countingBody struct {
	read   atomic.Int64
	closed atomic.Bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	b.read.Add(int64(len(p)))
	return len(p), nil
}

func (b *countingBody) Close() error {
	b.closed.Store(true)
	return nil
}

// closeTracker wraps a reader and records whether it was closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error {
	c.closed.Store(true)
	return nil
}

func TestReadErrorBodyNeverReadsBeyondLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int64{1, 511, 512, 513, 1000, 64 << 10} {
		body := &countingBody{}
		got, err := ReadErrorBody(context.Background(), &http.Response{Body: body}, limit)
		require.NoError(t, err)
		assert.Len(t, got, int(limit))
		assert.LessOrEqual(t, cap(got), int(limit), "buffer larger than limit %d", limit)
		assert.Equal(t, limit, body.read.Load(), "bytes asked of the body for limit %d", limit)
		assert.True(t, body.closed.Load())
	}
}

func TestReadErrorBody(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name    string
		body    io.Reader
		limit   int64
		want    string
		wantErr error
	}{
		{name: "short body read to EOF", body: strings.NewReader(`{"error":{}}`), limit: 64, want: `{"error":{}}`},
		{name: "body exactly the limit", body: strings.NewReader("abcd"), limit: 4, want: "abcd"},
		{name: "long body truncated", body: strings.NewReader(strings.Repeat("a", 5000)), limit: 1000, want: strings.Repeat("a", 1000)},
		{name: "one byte at a time", body: iotest.OneByteReader(strings.NewReader("hello")), limit: 64, want: "hello"},
		{name: "data with EOF", body: iotest.DataErrReader(strings.NewReader("hello")), limit: 64, want: "hello"},
		{name: "empty body", body: strings.NewReader(""), limit: 64, want: ""},
		{name: "zero limit reads nothing", body: strings.NewReader("hello"), limit: 0, want: ""},
		{name: "negative limit reads nothing", body: strings.NewReader("hello"), limit: -1, want: ""},
		{name: "read error keeps partial body", body: io.MultiReader(strings.NewReader("par"), iotest.ErrReader(boom)), limit: 64, want: "par", wantErr: boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := &closeTracker{Reader: tt.body}
			got, err := ReadErrorBody(context.Background(), &http.Response{Body: body}, tt.limit)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.want, string(got))
			assert.True(t, body.closed.Load(), "body not closed")
		})
	}
}

func TestReadErrorBodyNoBody(t *testing.T) {
	t.Parallel()
	got, err := ReadErrorBody(context.Background(), nil, 64)
	require.NoError(t, err)
	assert.Nil(t, got)
	got, err = ReadErrorBody(context.Background(), &http.Response{}, 64)
	require.NoError(t, err)
	assert.Nil(t, got)
}

// The stall tests run in a synctest bubble: a read that never returns shows
// up as a deadlock failure at once instead of hanging the test binary.
func TestReadErrorBodyStalledBodyEndsWithContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe() // never written: the body stalls
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := ReadErrorBody(ctx, &http.Response{Body: pr}, 64)
			done <- err
		}()
		synctest.Wait()
		require.Empty(t, done, "returned before the context ended")
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		_, err := pw.Write([]byte("late"))
		assert.ErrorIs(t, err, io.ErrClosedPipe, "body was not closed")
	})
}

func TestReadErrorBodyDeadlineWhileStalled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pr, _ := io.Pipe()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		defer cancel()
		start := time.Now()
		got, err := ReadErrorBody(ctx, &http.Response{Body: pr}, 64)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Empty(t, got)
		assert.Equal(t, 30*time.Millisecond, time.Since(start))
	})
}

func TestReadErrorBodyContextAlreadyDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := &countingBody{}
	got, err := ReadErrorBody(ctx, &http.Response{Body: body}, 64)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, got)
	assert.Zero(t, body.read.Load())
	assert.True(t, body.closed.Load())
}

func TestParseErrorBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want errorInfo
	}{
		{name: "openai", body: quotaOpenAI, want: errorInfo{typ: "insufficient_quota", code: "insufficient_quota", quota: "insufficient_quota"}},
		{name: "anthropic", body: overloadedAnth, want: errorInfo{typ: "overloaded_error"}},
		{name: "gemini", body: geminiExhaust, want: errorInfo{status: "resource_exhausted"}},
		{name: "gemini list", body: "[" + geminiExhaust + "]", want: errorInfo{status: "resource_exhausted"}},
		{name: "numbers are never codes", body: `{"error":{"code":1e2,"type":429,"status":-1}}`, want: errorInfo{}},
		{name: "a digit string is kept", body: `{"error":{"code":"429"}}`, want: errorInfo{code: "429"}},
		{name: "byte-order mark", body: "\uFEFF" + overloadedAnth, want: errorInfo{typ: "overloaded_error"}},
		{name: "byte-order mark then whitespace", body: "\uFEFF\r\n\t " + overloadedAnth, want: errorInfo{typ: "overloaded_error"}},
		{name: "byte-order mark before a quota body", body: "\uFEFF" + `{"type":"error","error":{"type":"billing_error"}}`, want: errorInfo{typ: "billing_error", quota: "billing_error"}},
		{name: "byte-order mark before plain text", body: "\uFEFFinsufficient_quota", want: errorInfo{quota: "insufficient_quota"}},
		{name: "whitespace before the byte-order mark is not JSON", body: " \uFEFF" + overloadedAnth, want: errorInfo{}},
		{name: "two byte-order marks is not JSON", body: "\uFEFF\uFEFF" + overloadedAnth, want: errorInfo{}},
		{name: "form feed is not JSON whitespace", body: "\f" + overloadedAnth, want: errorInfo{}},
		{name: "vertical tab is not JSON whitespace", body: overloadedAnth + "\v", want: errorInfo{}},
		{name: "no-break space is not JSON whitespace", body: "\u00a0" + overloadedAnth, want: errorInfo{}},
		{name: "invalid UTF-8 in a message", body: `{"error":{"type":"overloaded_error","message":"` + "\xff\xfe" + `"}}`, want: errorInfo{typ: "overloaded_error"}},
		{name: "invalid UTF-8 in a code drops it", body: `{"error":{"code":"rate` + "\xff" + `limit"}}`, want: errorInfo{}},
		{name: "field names fold as Go's JSON folds them", body: `{"ERROR":{"\u017ftatus":"UNAVAILABLE"}}`, want: errorInfo{status: "unavailable"}},
		{name: "empty list", body: "[]", want: errorInfo{}},
		{name: "leading whitespace", body: "\n  " + overloadedAnth, want: errorInfo{typ: "overloaded_error"}},
		{name: "upper-case code lowered", body: `{"error":{"code":"INSUFFICIENT_QUOTA"}}`, want: errorInfo{code: "insufficient_quota", quota: "insufficient_quota"}},
		{name: "error is a string", body: `{"error":"insufficient_quota"}`, want: errorInfo{}},
		{name: "error is null", body: `{"error":null}`, want: errorInfo{}},
		{name: "fields of other types", body: `{"error":{"type":true,"code":{"a":1},"status":[1]}}`, want: errorInfo{}},
		{name: "free text dropped", body: `{"error":{"type":"bad thing happened"}}`, want: errorInfo{}},
		{name: "json scalar", body: `42`, want: errorInfo{}},
		{name: "plain text token", body: "insufficient_quota", want: errorInfo{quota: "insufficient_quota"}},
		{name: "plain text token in sentence", body: "code=insufficient_quota.", want: errorInfo{quota: "insufficient_quota"}},
		{name: "plain text token glued", body: "xinsufficient_quota insufficient_quotas", want: errorInfo{}},
		{name: "plain text second occurrence counts", body: "ainsufficient_quota insufficient_quota", want: errorInfo{quota: "insufficient_quota"}},
		{name: "truncated json falls back to text", body: `{"error":{"code":"insufficient_quota","mess`, want: errorInfo{quota: "insufficient_quota"}},
		{name: "html", body: "<html>503 Service Unavailable</html>", want: errorInfo{}},
		{name: "empty", body: "", want: errorInfo{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, parseErrorBody([]byte(tt.body)))
		})
	}
}

func TestSanitizeCode(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{name: "plain", in: "rate_limit_exceeded", want: "rate_limit_exceeded"},
		{name: "upper", in: "RESOURCE_EXHAUSTED", want: "resource_exhausted"},
		{name: "dots and dashes", in: "a.b-c", want: "a.b-c"},
		{name: "space", in: "a b", want: ""},
		{name: "non-ascii", in: "überlastet", want: ""},
		{name: "64 chars", in: strings.Repeat("a", 64), want: strings.Repeat("a", 64)},
		{name: "65 chars", in: strings.Repeat("a", 65), want: ""},
		{name: "empty", in: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, sanitizeCode(tt.in))
		})
	}
}
