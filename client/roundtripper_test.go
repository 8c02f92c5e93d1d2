package client

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoundTripper(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       func() io.Reader // nil: no body
		script     []reply
		wantStatus int
		wantHits   int64
	}{
		{name: "retried with GetBody", body: func() io.Reader { return strings.NewReader(`{"model":"m"}`) },
			script: []reply{{status: 500}, {status: 200, body: "done"}}, wantStatus: 200, wantHits: 2},
		{name: "no body retried", script: []reply{{status: 502}, {status: 200, body: "done"}}, wantStatus: 200, wantHits: 2},
		{name: "body without GetBody not retried", body: func() io.Reader { return io.NopCloser(strings.NewReader(`{"model":"m"}`)) },
			script: []reply{{status: 500, body: "boom"}, {status: 200}}, wantStatus: 500, wantHits: 1},
		{name: "final error response returned as a response", script: []reply{{status: 400, body: `{"error":{"type":"invalid_request_error"}}`}},
			wantStatus: 400, wantHits: 1},
	}
	cd := startCooldownd(t, fastPolicy())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prov := newProvider(t, tt.script...)
			c := newClient(t, cd.URL)
			hc := &http.Client{Transport: c.RoundTripper(conn(t, c, prov.URL, "key-"+tt.name, ""), nil)}
			var body io.Reader
			method := http.MethodGet
			if tt.body != nil {
				body, method = tt.body(), http.MethodPost
			}
			req, err := http.NewRequestWithContext(t.Context(), method, prov.URL, body)
			require.NoError(t, err)
			resp, err := hc.Do(req)
			require.NoError(t, err)
			defer func() { _ = resp.Body.Close() }()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tt.wantStatus, resp.StatusCode)
			want := tt.script[min(int(tt.wantHits), len(tt.script))-1].body
			assert.Equal(t, want, string(b), "the caller reads the body of the response returned")
			assert.Equal(t, tt.wantHits, prov.hits.Load())
			if tt.body != nil {
				for _, got := range prov.received() {
					assert.JSONEq(t, `{"model":"m"}`, got, "every attempt sends the whole body")
				}
			}
		})
	}
}

func TestRoundTripperDenied(t *testing.T) {
	t.Parallel()
	cd := startCooldownd(t, fastPolicy())
	prov := newProvider(t, reply{status: 429, body: quotaBody})
	c := newClient(t, cd.URL)
	cn := conn(t, c, prov.URL, "key-1", "")
	hc := &http.Client{Transport: c.RoundTripper(cn, nil)}

	resp, err := hc.Get(prov.URL)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)

	body := &closeRecorder{Reader: strings.NewReader("x")}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, prov.URL, body)
	require.NoError(t, err)
	_, err = hc.Do(req)
	var d *DeniedError
	require.ErrorAs(t, err, &d, "http.Client wraps the denial in a *url.Error")
	assert.Equal(t, ReasonQuota, d.Reason)
	assert.Equal(t, int64(1), prov.hits.Load())
	assert.True(t, body.closed, "an unsent body is closed")
}

func TestRoundTripperFuncPickError(t *testing.T) {
	t.Parallel()
	c := newClient(t, "http://127.0.0.1:1")
	errNoConn := errors.New("no connection for this model")
	hc := &http.Client{Transport: c.RoundTripperFunc(func(*http.Request) (Conn, error) { return Conn{}, errNoConn }, nil)}
	_, err := hc.Get("http://127.0.0.1:1/")
	require.ErrorIs(t, err, errNoConn)
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }
