package worker

import (
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// Wire is what a worker's client said to cooldownd and heard back, read
// off the wire by [observer]: the worker cannot see a guard's denials any
// other way (a denied call that waits and then succeeds looks like a slow
// success).
type Wire struct {
	// Admits counts Admit answers; RetryAdmits the Admits that marked a
	// candidate as a retry (AdmitRequest.retry).
	Admits      int `json:"admits"`
	RetryAdmits int `json:"retry_admits"`
	// Denies counts DENY answers by reason (DENY_REASON_OPEN, …).
	Denies map[string]int `json:"denies,omitempty"`
	// Shadowed counts answers that allowed a call the policy would have
	// denied, by that reason (AdmitResponse.shadow_deny_reason).
	Shadowed map[string]int `json:"shadowed,omitempty"`
	// Throttled counts answers with a throttle probability above 0.
	Throttled int `json:"throttled"`
	// Reports counts Report requests (a success batch once); RetryReports
	// those marked as a retry; Reporters the distinct reporter ids sent.
	Reports      int      `json:"reports"`
	RetryReports int      `json:"retry_reports"`
	Reporters    []string `json:"reporters,omitempty"`
	// Undecoded counts Admit or Report messages the observer could not
	// read (the counts above miss them).
	Undecoded int `json:"undecoded"`
}

// Denied is the number of DENY answers of every reason.
func (w Wire) Denied() int {
	n := 0
	for _, c := range w.Denies {
		n += c
	}
	return n
}

// observer is the connect.HTTPClient of a worker's client: it passes
// every request on and counts the Admit and Report messages.
type observer struct {
	next *http.Client
	mu   sync.Mutex
	wire Wire
}

// newObserver returns an observer over an HTTP/2 cleartext client, the
// protocol cooldownd serves on loopback.
func newObserver() *observer {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &observer{next: &http.Client{Transport: &http.Transport{
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		Protocols:   &p, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute,
		DisableCompression: true, // no transparent gzip: the answers come as sent
	}}}
}

// Do implements connect.HTTPClient.
func (o *observer) Do(req *http.Request) (*http.Response, error) {
	method := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
	if method != "Admit" && method != "Report" {
		return o.next.Do(req)
	}
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	// An uncompressed answer, so that it can be read here.
	req.Header.Del("Accept-Encoding")
	req.Header.Del("Connect-Accept-Encoding")
	resp, err := o.next.Do(req)
	if err != nil {
		return resp, err
	}
	var answer []byte
	if method == "Admit" && resp.StatusCode == http.StatusOK {
		answer, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		if resp.Header.Get("Content-Encoding") == "gzip" {
			answer = gunzip(answer)
		}
	}
	o.count(method, body, answer)
	return resp, nil
}

// readBody reads a request's body and puts it back.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	if req.Header.Get("Content-Encoding") == "gzip" {
		return gunzip(b), nil
	}
	return b, nil
}

func gunzip(b []byte) []byte {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil
	}
	return out
}

// count decodes one exchange: an Admit's request and answer (answer nil
// when the call failed), or a Report's request.
func (o *observer) count(method string, body, answer []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := &o.wire
	if method == "Report" {
		var m cooldownv1.ReportRequest
		if proto.Unmarshal(body, &m) != nil {
			w.Undecoded++
			return
		}
		w.Reports++
		if m.GetRetry() {
			w.RetryReports++
		}
		if r := m.GetReporter(); r != "" && !slices.Contains(w.Reporters, r) {
			w.Reporters = append(w.Reporters, r)
		}
		return
	}
	var req cooldownv1.AdmitRequest
	if proto.Unmarshal(body, &req) != nil {
		w.Undecoded++
	} else if slices.Contains(req.GetRetry(), true) {
		w.RetryAdmits++
	}
	if answer == nil {
		return
	}
	var m cooldownv1.AdmitResponse
	if proto.Unmarshal(answer, &m) != nil {
		w.Undecoded++
		return
	}
	w.Admits++
	if m.GetDecision() == cooldownv1.Decision_DECISION_DENY {
		if w.Denies == nil {
			w.Denies = make(map[string]int)
		}
		w.Denies[m.GetDenyReason().String()]++
	}
	if r := m.GetShadowDenyReason(); r != cooldownv1.DenyReason_DENY_REASON_UNSPECIFIED {
		if w.Shadowed == nil {
			w.Shadowed = make(map[string]int)
		}
		w.Shadowed[r.String()]++
	}
	if m.GetThrottleProbability() > 0 {
		w.Throttled++
	}
}

// snapshot returns a copy of the counts.
func (o *observer) snapshot() Wire {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.wire
	w.Denies = cloneMap(w.Denies)
	w.Shadowed = cloneMap(w.Shadowed)
	w.Reporters = slices.Clone(w.Reporters)
	return w
}

func cloneMap(m map[string]int) map[string]int {
	if m == nil {
		return nil
	}
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
