package client

import (
	"context"
	"net/http"
)

// RoundTripper returns an [http.RoundTripper] that guards every request
// through base (nil: [http.DefaultTransport]) on conn, as [Client.Do] does.
// Use it to guard an SDK that accepts an *http.Client, and turn the SDK's
// own retries off, or every retry is multiplied:
//
//	hc := &http.Client{Transport: c.RoundTripper(conn, nil)}
//	openai.NewClient(option.WithHTTPClient(hc), option.WithMaxRetries(0))
//	anthropic.NewClient(option.WithHTTPClient(hc), option.WithMaxRetries(0))
//
// A request is retried only when its body can be sent again: it has no
// body, or GetBody is set (as [http.NewRequest] sets it for a
// [bytes.Reader], [bytes.Buffer] or [strings.Reader]). Unlike
// [Client.Do], a final non-2xx response is returned as a response with a
// nil error (its body holds the bytes the guard read), so the SDK sees the
// provider's error as usual. A denial returns a [*DeniedError], and a
// failure without a response an [*Error]; [http.Client] wraps both in a
// [*url.Error], which [errors.As] looks through.
func (c *Client) RoundTripper(conn Conn, base http.RoundTripper) http.RoundTripper {
	return c.RoundTripperFunc(func(*http.Request) (Conn, error) { return conn, nil }, base)
}

// RoundTripperFunc is [Client.RoundTripper] with the connection picked per
// request, for a transport shared by several models or keys. An error from
// pick fails the request unsent.
func (c *Client) RoundTripperFunc(pick func(*http.Request) (Conn, error), base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &roundTripper{c: c, pick: pick, base: base}
}

type roundTripper struct {
	c    *Client
	pick func(*http.Request) (Conn, error)
	base http.RoundTripper
}

// RoundTrip implements [http.RoundTripper].
func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := false
	defer func() {
		if !sent && req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even unsent
		}
	}()
	conn, err := t.pick(req)
	if err != nil {
		return nil, err
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	retries := t.c.cfg.maxRetries
	if hasBody && req.GetBody == nil {
		retries = 0
	}
	resp, err := t.c.guard(req.Context(), "round_tripper", []Conn{conn}, retries, func(ctx context.Context, _ Conn, _ int) (*http.Response, error) {
		r := req
		if sent {
			r = req.Clone(ctx)
			if hasBody {
				body, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				r.Body = body
			}
		}
		sent = true
		return t.base.RoundTrip(r)
	})
	// Only the guard's own *Error, not one wrapped in a denial, hands
	// back its response.
	if e, ok := err.(*Error); ok && e.Response != nil && req.Context().Err() == nil {
		return e.Response, nil
	}
	return resp, err
}
