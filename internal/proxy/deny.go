package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/cooldownd/cooldownd/client"
)

// denial is how the proxy answers one deny reason: the status and error
// types the provider's SDKs know, and whether retrying is pointless
// whatever the wait.
type denial struct {
	status          int
	openaiType      string
	anthropicType   string
	anthropicStatus int // 0: status
	noRetry         bool
}

func denialOf(r client.DenyReason) denial {
	switch r {
	case client.ReasonCooldown, client.ReasonThrottled:
		return denial{status: http.StatusTooManyRequests, openaiType: "rate_limit_error", anthropicType: "rate_limit_error"}
	case client.ReasonRetryBudget:
		// A retry over the fleet's budget: retrying spends what others need.
		return denial{status: http.StatusTooManyRequests, openaiType: "rate_limit_error", anthropicType: "rate_limit_error", noRetry: true}
	case client.ReasonQuota:
		return denial{status: http.StatusTooManyRequests, openaiType: "insufficient_quota", anthropicType: "rate_limit_error", noRetry: true}
	case client.ReasonAuth:
		return denial{status: http.StatusUnauthorized, openaiType: "authentication_error", anthropicType: "authentication_error", noRetry: true}
	case client.ReasonOverloaded:
		return denial{status: http.StatusServiceUnavailable, openaiType: "service_unavailable_error", anthropicType: "overloaded_error", anthropicStatus: 529}
	default: // open, forced open, probe in flight, unavailable
		return denial{status: http.StatusServiceUnavailable, openaiType: "service_unavailable_error", anthropicType: "api_error"}
	}
}

// answerError is the ReverseProxy's error handler: a denial in the
// upstream's error shape, or a failure without a response as a 502.
func (p *Proxy) answerError(w http.ResponseWriter, r *http.Request, err error) {
	pl, _ := r.Context().Value(planKey{}).(*plan)
	route, provider, model := "", ProviderOpenAI, ""
	if pl != nil {
		route, provider, model = pl.cands[0].route.Prefix, pl.cands[0].route.Provider, pl.model
	}
	if d, ok := errors.AsType[*client.DeniedError](err); ok {
		p.metrics.count(route, model, "denied")
		p.log.Info("denied", "route", route, "model", model, "reason", d.Reason.String(), "retry_after", d.RetryAfter, "conn", d.Conn, "local", d.Local)
		p.writeDenial(w, provider, d)
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		p.metrics.count(route, model, "canceled")
		return // the app left; nobody reads an answer
	}
	if rej, ok := errors.AsType[*client.RejectedError](err); ok {
		// cooldownd refused the proxy's own call (a bad or missing token, a
		// label it screens out): the operator's to fix, not the app's.
		p.metrics.count(route, model, "error")
		p.log.Error("cooldownd rejected the proxy's request", "route", route, "model", model, "op", rej.Op, "code", rej.Code.String())
		p.shapedError(w, provider, http.StatusServiceUnavailable, "api_error", "cooldownd_rejected",
			"cooldown-proxy: cooldownd rejected the proxy's "+rej.Op+" ("+rej.Code.String()+"); see the proxy's log")
		return
	}
	p.metrics.count(route, model, "error")
	code := "cooldownd_upstream_error"
	if e, ok := errors.AsType[*client.Error](err); ok && e.ErrorCode != "" {
		code = e.ErrorCode
	}
	// The error's text may quote the upstream URL, never a credential
	// (the client's errors hold none); the code is enough in the log.
	p.log.Warn("upstream failed", "route", route, "model", model, "code", code)
	p.shapedError(w, provider, http.StatusBadGateway, "api_error", code, "cooldown-proxy could not reach the upstream: "+code)
}

// writeDenial answers d in provider's error shape, with the wait in
// Retry-After and retry-after-ms and x-should-retry: false when retrying
// is pointless or the wait is past the SDKs' retry limit.
func (p *Proxy) writeDenial(w http.ResponseWriter, provider string, d *client.DeniedError) {
	dn := denialOf(d.Reason)
	reason := d.Reason.String()
	h := w.Header()
	h.Set("cooldownd-reason", reason)
	wait := max(d.RetryAfter, 0)
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	h.Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
	retry := !dn.noRetry && wait <= p.cfg.RetryLimit
	h.Set("x-should-retry", strconv.FormatBool(retry))
	msg := fmt.Sprintf("cooldownd denied the call: %s, retry after %s", reason, wait.Round(time.Millisecond))
	status, typ := dn.status, dn.openaiType
	if provider == ProviderAnthropic {
		typ = dn.anthropicType
		if dn.anthropicStatus != 0 {
			status = dn.anthropicStatus
		}
	}
	p.shapedError(w, provider, status, typ, "cooldownd_"+reason, msg)
}

// shapedError writes an error body in provider's shape: OpenAI's
// {"error":{"message","type","param","code"}} or Anthropic's
// {"type":"error","error":{"type","message"}}.
func (p *Proxy) shapedError(w http.ResponseWriter, provider string, status int, typ, code, msg string) {
	var body any
	if provider == ProviderAnthropic {
		body = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	} else {
		body = map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// plainError answers a request the proxy refuses before picking a route:
// in OpenAI's shape, which most SDKs read.
func (p *Proxy) plainError(w http.ResponseWriter, status int, msg string) {
	p.metrics.count("", "", "rejected")
	p.shapedError(w, ProviderOpenAI, status, "invalid_request_error", "cooldownd_proxy_refused", msg)
}
