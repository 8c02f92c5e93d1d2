package conformance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/client"
)

// fixture is the repository's testdata/classification.json, the cases
// both clients run.
type fixture struct {
	Now   time.Time `json:"now"`
	Cases []struct {
		Name       string              `json:"name"`
		Status     int                 `json:"status"`
		Headers    map[string][]string `json:"headers"`
		Body       *string             `json:"body"`
		BodyBase64 *string             `json:"body_base64"`
		Error      *struct {
			Kind    string `json:"kind"`
			Errno   string `json:"errno"`
			Message string `json:"message"`
		} `json:"error"`
		Caller string `json:"caller"`
		Rules  struct {
			MaxServerDelayMs int64 `json:"max_server_delay_ms"`
			MaxBodyBytes     int64 `json:"max_body_bytes"`
		} `json:"rules"`
		Want want `json:"want"`
	} `json:"cases"`
}

type want struct {
	Outcome      string `json:"outcome"`
	Retryable    bool   `json:"retryable"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	HTTPStatus   int    `json:"http_status"`
	ErrorCode    string `json:"error_code"`
	ProactiveMs  int64  `json:"proactive_ms"`
	TooLong      bool   `json:"too_long"`
}

var errnos = map[string]syscall.Errno{
	"ECONNRESET": syscall.ECONNRESET, "ECONNABORTED": syscall.ECONNABORTED, "EPIPE": syscall.EPIPE,
	"ECONNREFUSED": syscall.ECONNREFUSED, "ETIMEDOUT": syscall.ETIMEDOUT, "EHOSTUNREACH": syscall.EHOSTUNREACH,
}

func wrapURL(err error) error {
	return &url.Error{Op: "Post", URL: "https://api.example.com/v1", Err: err}
}

// header builds the response header line by line (as a gateway that
// repeats a field sends it), expanding the fixture's time placeholders
// against now.
func header(t *testing.T, h map[string][]string, now time.Time) http.Header {
	out := http.Header{}
	for k, lines := range h {
		require.NotEmpty(t, lines, "header %s has no line", k)
		for _, v := range lines {
			out.Add(k, expand(t, v, now))
		}
	}
	return out
}

// expand expands one line's time placeholder against now.
func expand(t *testing.T, v string, now time.Time) string {
	for _, f := range []struct{ prefix, layout string }{
		{"@http:", http.TimeFormat}, {"@rfc3339nano:", time.RFC3339Nano}, {"@rfc3339:", time.RFC3339},
	} {
		if rest, ok := strings.CutPrefix(v, f.prefix); ok {
			ms, err := strconv.ParseInt(rest, 10, 64)
			require.NoError(t, err, v)
			return now.Add(time.Duration(ms) * time.Millisecond).UTC().Format(f.layout)
		}
	}
	return v
}

// ceilMs is d in milliseconds, a remainder rounded up (as the TypeScript
// client holds durations).
func ceilMs(d time.Duration) int64 { return int64(math.Ceil(float64(d) / float64(time.Millisecond))) }

func TestClassificationFixture(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../testdata/classification.json")
	require.NoError(t, err)
	var fx fixture
	require.NoError(t, json.Unmarshal(raw, &fx))
	require.GreaterOrEqual(t, len(fx.Cases), 150)
	for _, tc := range fx.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			rules := client.DefaultRules()
			rules.Now = func() time.Time { return fx.Now }
			if tc.Rules.MaxServerDelayMs > 0 {
				rules.MaxServerDelay = time.Duration(tc.Rules.MaxServerDelayMs) * time.Millisecond
			}
			if tc.Rules.MaxBodyBytes > 0 {
				rules.MaxBodyBytes = tc.Rules.MaxBodyBytes
			}
			var resp *http.Response
			if tc.Status != 0 {
				resp = &http.Response{StatusCode: tc.Status, Header: header(t, tc.Headers, fx.Now)}
			}
			require.False(t, tc.Body != nil && tc.BodyBase64 != nil, "body and body_base64 both set")
			var body []byte
			switch {
			case tc.Body != nil:
				body = []byte(*tc.Body)
			case tc.BodyBase64 != nil:
				var err error
				body, err = base64.StdEncoding.DecodeString(*tc.BodyBase64)
				require.NoError(t, err)
			}
			var callErr error
			if e := tc.Error; e != nil {
				switch e.Kind {
				case "errno":
					errno, ok := errnos[e.Errno]
					require.True(t, ok, "unknown errno %s", e.Errno)
					callErr = wrapURL(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)})
				case "timeout":
					callErr = wrapURL(context.DeadlineExceeded)
				case "eof":
					callErr = wrapURL(io.ErrUnexpectedEOF)
				case "dns_not_found":
					callErr = wrapURL(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "api.example.com", IsNotFound: true}})
				case "dns_temporary":
					callErr = wrapURL(&net.DNSError{Err: "server misbehaving", Name: "api.example.com", IsTemporary: true})
				case "dns_other":
					callErr = wrapURL(&net.DNSError{Err: "bad reply", Name: "api.example.com"})
				case "tls_certificate":
					callErr = wrapURL(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}})
				case "abort":
					callErr = wrapURL(context.Canceled)
				case "unknown":
					callErr = errors.New(e.Message)
				default:
					t.Fatalf("unknown error kind %q", e.Kind)
				}
			}
			var ctxErr error
			switch tc.Caller {
			case "canceled":
				ctxErr = context.Canceled
			case "deadline_exceeded":
				ctxErr = context.DeadlineExceeded
			}
			got := client.Classify(rules, resp, body, callErr, ctxErr)
			assert.Equal(t, tc.Want, want{
				Outcome: got.Outcome.String(), Retryable: got.Retryable, RetryAfterMs: ceilMs(got.RetryAfter),
				HTTPStatus: got.HTTPStatus, ErrorCode: got.ErrorCode, ProactiveMs: ceilMs(got.Proactive), TooLong: got.TooLong,
			})
		})
	}
}
