package dashboard_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/server"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// fleetEdits are what a test adds to the server's answers about some
// connections: their shadow mode, fleet counts and effective policy. The
// page then sees what a server with those policies would send, whatever
// the store fills in yet.
type fleetEdits struct {
	mu     sync.Mutex
	shadow map[string]bool                       // hex id → shadow policy
	fleet  map[string]*cooldownv1.FleetCounts    // hex id → counts
	policy map[string]func(p *cooldownv1.Policy) // hex id → policy edit
	// explain is what the server explains of those counts and policies,
	// while the connection is closed (then the server's own explanation).
	explain map[string]*cooldownv1.Explanation // hex id → explanation
}

func (e *fleetEdits) state(c *cooldownv1.ConnectionState) {
	if c == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	id := fmt.Sprintf("%x", c.GetConnection().GetId())
	if e.shadow[id] {
		c.Shadow = true
	}
	if f := e.fleet[id]; f != nil {
		c.Fleet = proto.CloneOf(f)
	}
	if x := e.explain[id]; x != nil && (c.GetState() == cooldownv1.State_STATE_CLOSED || x.GetSeverity() < 10) {
		c.Explanation = proto.CloneOf(x)
	}
}

func (e *fleetEdits) transition(id []byte, t *cooldownv1.Transition) {
	if t == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t.Shadow = e.shadow[fmt.Sprintf("%x", id)]
}

func (e *fleetEdits) editPolicy(id []byte, p *cooldownv1.Policy) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f := e.policy[fmt.Sprintf("%x", id)]; f != nil && p != nil {
		f(p)
	}
}

// edit applies the edits to one answer of the API.
func (e *fleetEdits) edit(m proto.Message) {
	switch m := m.(type) {
	case *cooldownv1.ListConnectionsResponse:
		for _, c := range m.GetConnections() {
			e.state(c)
		}
	case *cooldownv1.GetConnectionResponse:
		e.state(m.GetConnection())
		id := m.GetConnection().GetConnection().GetId()
		e.editPolicy(id, m.GetPolicy())
		for _, t := range m.GetHistory() {
			e.transition(id, t)
		}
	case *cooldownv1.WatchConnectionsResponse:
		e.state(m.GetConnection())
		e.transition(m.GetConnection().GetConnection().GetId(), m.GetTransition())
	}
}

// rewriteAnswers makes srv answer ListConnections, GetConnection and the
// WatchConnections stream through its own handler, then rewrites each
// JSON message with ed (the page speaks Connect's JSON; the answers are
// asked uncompressed).
func rewriteAnswers(t *testing.T, srv *servertest.Server, ed *fleetEdits) {
	t.Helper()
	h := srv.Server().Handler()
	srv.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		var newMsg func() proto.Message
		switch path.Base(r.URL.Path) {
		case "ListConnections":
			newMsg = func() proto.Message { return &cooldownv1.ListConnectionsResponse{} }
		case "GetConnection":
			newMsg = func() proto.Message { return &cooldownv1.GetConnectionResponse{} }
		case "WatchConnections":
			newMsg = func() proto.Message { return &cooldownv1.WatchConnectionsResponse{} }
		default:
			return false
		}
		r.Header.Del("Accept-Encoding")
		r.Header.Del("Connect-Accept-Encoding")
		rewrite := func(b []byte) []byte {
			m := newMsg()
			if err := protojson.Unmarshal(b, m); err != nil {
				t.Errorf("%s: decode %q: %v", r.URL.Path, b, err)
				return b
			}
			ed.edit(m)
			out, err := protojson.Marshal(m)
			if err != nil {
				t.Errorf("%s: encode: %v", r.URL.Path, err)
				return b
			}
			return out
		}
		if path.Base(r.URL.Path) == "WatchConnections" {
			h.ServeHTTP(&envelopeRewriter{w: w, rewrite: rewrite}, r)
			return true
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if rec.Code == http.StatusOK {
			body = rewrite(body)
		}
		for k, v := range rec.Header() {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
		return true
	})
}

// envelopeRewriter rewrites the messages of a Connect stream (5-byte
// envelopes: flags, big-endian length) as the handler writes them; the
// end-of-stream envelope passes unchanged.
type envelopeRewriter struct {
	w       http.ResponseWriter
	rewrite func([]byte) []byte
	buf     []byte
}

func (e *envelopeRewriter) Header() http.Header { return e.w.Header() }

func (e *envelopeRewriter) WriteHeader(code int) {
	e.w.Header().Del("Content-Length")
	e.w.WriteHeader(code)
}

func (e *envelopeRewriter) Write(p []byte) (int, error) {
	e.buf = append(e.buf, p...)
	for len(e.buf) >= 5 {
		n := int(binary.BigEndian.Uint32(e.buf[1:5]))
		if len(e.buf) < 5+n {
			break
		}
		flags, data := e.buf[0], e.buf[5:5+n]
		if flags == 0 && n > 0 {
			data = e.rewrite(data)
		}
		var head [5]byte
		head[0] = flags
		binary.BigEndian.PutUint32(head[1:], uint32(len(data)))
		if _, err := e.w.Write(append(head[:], data...)); err != nil {
			return 0, err
		}
		e.buf = bytes.Clone(e.buf[5+n:])
	}
	return len(p), nil
}

func (e *envelopeRewriter) Flush() {
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

// TestDashboardFleetRules: a shadow policy's connection is marked shadow
// in its row (a card at 390 px) and detail view and its why says it is not
// enforced; the fleet counts show in the detail view only when one is
// non-zero; the why of a closed connection names the throttle (throttled)
// and a spent retry budget (retry_budget); the effective policy lists the
// fleet knobs; a shadow transition arriving live is marked in the
// timeline and the history.
func TestDashboardFleetRules(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprintf("%dpx", w), func(t *testing.T) { fleetRulesAt(t, w) })
	}
}

func fleetRulesAt(t *testing.T, width int64) {
	ctx := browser(t, width)
	srv := newLiveServer(t, servertest.Tokens(t))
	app, _ := srv.client(clientToken)
	rctx := t.Context()

	shadowOpen, throttled, plain, shadowLive, quiet := servertest.NewID(), servertest.NewID(), servertest.NewID(), servertest.NewID(), servertest.NewID()
	report(rctx, t, app, shadowOpen, "openai gpt-4o (shadow) …a1b2", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, "rate_limit_exceeded", 10*time.Minute)
	for range 3 {
		report(rctx, t, app, throttled, "anthropic claude …9f3c", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, "", 0)
	}
	report(rctx, t, app, plain, "gemini-2.5-pro …77d0", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, "", 0)
	report(rctx, t, app, shadowLive, "mistral large (shadow) …8b1e", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, "", 0)
	report(rctx, t, app, quiet, "azure gpt-4o-mini …3d9a", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, "", 0)
	hx := func(id []byte) string { return fmt.Sprintf("%x", id) }
	const shadowText = "shadow mode: the policy's denials are not enforced, calls are allowed"
	shadowPolicy := func(p *cooldownv1.Policy) { p.Shadow = true }
	ed := &fleetEdits{
		shadow: map[string]bool{hx(shadowOpen): true, hx(shadowLive): true},
		fleet: map[string]*cooldownv1.FleetCounts{
			hx(throttled):  {FirstAttempts: 120, Retries: 25, Requests: 140, Accepts: 30, ThrottleProbability: 0.352, FailureReporters: 1},
			hx(quiet):      {}, // as with every fleet rule off: no counts kept
			hx(shadowLive): {Requests: 10, ThrottleProbability: 0.5},
		},
		explain: map[string]*cooldownv1.Explanation{
			hx(shadowOpen): {Severity: 5, Reasons: []string{"rate limited (429): Retry-After 10m", shadowText}},
			hx(shadowLive): {Severity: 30, ThrottleProbability: 0.5, Throttling: true, Reasons: []string{"would throttle 50% of calls (throttled)", shadowText}},
			// max(0/s × 30 s, 20 % × 120) = 24 retries allowed; 25 are spent.
			hx(throttled): {Severity: 30, ThrottleProbability: 0.352, Throttling: true, QuorumReporters: 1, QuorumNeeded: 2,
				RetryBudget: &cooldownv1.RetryBudget{Retries: 25, Allowed: 24},
				Reasons:     []string{"throttling 35.2% of calls (throttled)", "retry budget spent (25 of 24 retries over 30s): retries are denied (retry_budget)"}},
		},
		policy: map[string]func(p *cooldownv1.Policy){
			hx(shadowOpen): shadowPolicy,
			hx(shadowLive): func(p *cooldownv1.Policy) { p.Shadow, p.ThrottleK = true, 2 },
			hx(throttled): func(p *cooldownv1.Policy) {
				p.RetryBudget, p.RetryBudgetMin, p.ThrottleK, p.TripQuorum = 0.2, 0, 2, 2
				p.FleetWindow = durationpb.New(30 * time.Second)
			},
			hx(quiet): func(p *cooldownv1.Policy) { p.RetryBudget, p.RetryBudgetMin, p.TripQuorum = 0, 0, 1 },
		},
	}
	rewriteAnswers(t, srv.Server, ed)

	act(t, ctx, chromedp.Navigate(srv.URL+"/"))
	act(t, ctx, chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), viewerToken),
		chromedp.Click(chromedp.ID("token-submit")))
	waitFor(t, ctx, "the table lists every connection", `document.querySelectorAll('#rows tr').length === 5`)

	// The rows: shadow marked, its why not enforced; the throttle and the
	// spent budget named by their deny reasons.
	shadowTag := func(id []byte) string { return text(rowSel(id) + ` .c-state .tag.shadow`) }
	assert.Equal(t, "shadow", eval[string](t, ctx, shadowTag(shadowOpen)))
	assert.Equal(t, "shadow", eval[string](t, ctx, shadowTag(shadowLive)))
	assert.Empty(t, eval[string](t, ctx, shadowTag(throttled)))
	assert.Empty(t, eval[string](t, ctx, shadowTag(plain)))
	// Each row shows the server's explanation, reasons most severe first.
	waitFor(t, ctx, "the shadow row says it is not enforced",
		text(rowSel(shadowOpen)+` .c-why .why-text`)+` === `+strconv.Quote("rate limited (429): Retry-After 10m; "+shadowText))
	waitFor(t, ctx, "the closed shadow row says what it would throttle, not enforced",
		text(rowSel(shadowLive)+` .c-why .why-text`)+` === `+strconv.Quote("would throttle 50% of calls (throttled); "+shadowText))
	waitFor(t, ctx, "the throttled row names the fleet rules that deny",
		text(rowSel(throttled)+` .c-why .why-text`)+` === 'throttling 35.2% of calls (throttled); retry budget spent (25 of 24 retries over 30s): retries are denied (retry_budget)'`)
	assert.Equal(t, "—", eval[string](t, ctx, text(rowSel(plain)+` .c-why .why-text`)))
	assert.Equal(t, "—", eval[string](t, ctx, text(rowSel(quiet)+` .c-why .why-text`)))
	eventually(t, ctx, []string{hx(shadowOpen), hx(throttled)}, `[...document.querySelectorAll('#rows tr')].map(r => r.dataset.id).slice(0, 2)`,
		"open first, then the throttled one before the healthy ones")
	assert.Greater(t, eval[float64](t, ctx, `document.querySelector('`+rowSel(shadowOpen)+` .c-state .tag.shadow').getBoundingClientRect().width`), 0.0, "the tag is visible")
	noOverflow(t, ctx, "the table with shadow tags and fleet whys")
	act(t, ctx, chromedp.SendKeys(chromedp.ID("filter"), "shadow"))
	waitFor(t, ctx, "the filter finds the shadow rows", `document.querySelectorAll('#rows tr').length === 2`)
	eval[bool](t, ctx, `(document.getElementById('filter').value = 'throttled', document.getElementById('filter').dispatchEvent(new Event('input')), true)`)
	waitFor(t, ctx, "the filter finds the throttling rows", `document.querySelectorAll('#rows tr').length === 2 && !!document.querySelector('`+rowSel(throttled)+`') && !!document.querySelector('`+rowSel(shadowLive)+`')`)
	eval[bool](t, ctx, `(document.getElementById('filter').value = '', document.getElementById('filter').dispatchEvent(new Event('input')), true)`)
	waitFor(t, ctx, "every row again", `document.querySelectorAll('#rows tr').length === 5`)

	// The throttled connection's detail: its fleet counts and the fleet
	// knobs of its policy.
	openRow(t, ctx, throttled)
	waitFor(t, ctx, "the detail view with the fleet counts and the policy",
		`document.getElementById('detail').open && !document.getElementById('detail-fleet-wrap').hidden && document.getElementById('detail-policy').textContent.includes('Throttle K')`)
	fleet := eval[string](t, ctx, `document.getElementById('detail-fleet').innerText`)
	for _, want := range []string{"First attempts\n120", "Retries\n25 of 24 allowed: budget spent, retries denied (retry_budget)",
		"Requests\n140", "Accepts\n30", "Throttle probability\n35.2 % of calls denied (throttled)", "Failure reporters\n1 of 2 to trip"} {
		assert.Contains(t, fleet, want)
	}
	assert.Equal(t, "Fleet counts (last 30s, every process)", eval[string](t, ctx, text(`#detail-fleet-title`)))
	pol := eval[string](t, ctx, `document.getElementById('detail-policy').innerText`)
	for _, want := range []string{"Retry budget\n20 % of first attempts", "Retry budget min\n0 retries/s",
		"Throttle K\n2: rejects max(0, (requests − 2·accepts) / (requests + 1)) while closed", "Trip quorum\n2 distinct reporters",
		"Fleet window\n30s", "Shadow\noff"} {
		assert.Contains(t, pol, want)
	}
	assert.Contains(t, eval[string](t, ctx, text(`#detail-why`)), "Closed, throttling 35.2% of calls (throttled)")
	noOverflow(t, ctx, "the detail view with the fleet counts")
	act(t, ctx, chromedp.Click(chromedp.ID("detail-close")))
	waitFor(t, ctx, "the detail view closes", `!document.getElementById('detail').open`)

	// The server's own counts: the default policy's retry budget counts the
	// reported first attempts (weighted: below 1 once its bucket is the
	// older one), and 3/s × 30s allow 90 retries.
	openRow(t, ctx, plain)
	waitFor(t, ctx, "the plain detail view with its fleet counts", `document.getElementById('detail').open && !document.getElementById('detail-fleet-wrap').hidden && document.getElementById('detail-policy').textContent.includes('Trip quorum')`)
	first := eval[float64](t, ctx, `parseFloat([...document.querySelectorAll('#detail-fleet dt')].find(d => d.textContent === 'First attempts').nextElementSibling.textContent)`)
	assert.True(t, first > 0 && first <= 1, "one first attempt reported, got %v", first)
	fleet = eval[string](t, ctx, `document.getElementById('detail-fleet').innerText`)
	assert.Contains(t, fleet, "Retries\n0 of 90 allowed, 90 left\n")
	pol = eval[string](t, ctx, `document.getElementById('detail-policy').innerText`)
	for _, want := range []string{"Retry budget\n20 % of first attempts", "Retry budget min\n3 retries/s", "Throttle K\noff",
		"Trip quorum\noff (any one reporter)", "Fleet window\n30s", "Shadow\noff"} {
		assert.Contains(t, pol, want)
	}
	act(t, ctx, chromedp.Click(chromedp.ID("detail-close")))
	waitFor(t, ctx, "the detail view closes", `!document.getElementById('detail').open`)

	// A connection with no fleet counts has no fleet section; its policy
	// says which rules are off.
	openRow(t, ctx, quiet)
	waitFor(t, ctx, "the quiet detail view with its policy", `document.getElementById('detail').open && document.getElementById('detail-policy').textContent.includes('Trip quorum')`)
	assert.True(t, eval[bool](t, ctx, `document.getElementById('detail-fleet-wrap').hidden`), "no fleet counts, no section")
	pol = eval[string](t, ctx, `document.getElementById('detail-policy').innerText`)
	for _, want := range []string{"Retry budget\noff", "Retry budget min\noff", "Throttle K\noff", "Trip quorum\noff (any one reporter)",
		"Fleet window\n30s (no fleet rule on)", "Shadow\noff"} {
		assert.Contains(t, pol, want)
	}
	act(t, ctx, chromedp.Click(chromedp.ID("detail-close")))
	waitFor(t, ctx, "the detail view closes", `!document.getElementById('detail').open`)

	// The shadow connection's detail: marked, not enforced, its history's
	// transition marked shadow.
	openRow(t, ctx, shadowOpen)
	waitFor(t, ctx, "the shadow detail view with its history", `document.getElementById('detail').open && document.getElementById('detail-policy').textContent.includes('Shadow') && !!document.querySelector('#detail-history .tag.shadow')`)
	assert.Equal(t, "Open: rate limited (429): Retry-After 10m; "+shadowText+".", eval[string](t, ctx, text(`#detail-why`)))
	assert.Equal(t, "shadow", eval[string](t, ctx, text(`#detail-fields .tag.shadow`)))
	fields := eval[string](t, ctx, `document.getElementById('detail-fields').innerText`)
	assert.Contains(t, fields, "Shadow\nyes: this state is not enforced, calls are allowed")
	assert.Contains(t, eval[string](t, ctx, `document.getElementById('detail-policy').innerText`), "Shadow\non: computed and published, not enforced")
	assert.Contains(t, eval[string](t, ctx, `document.getElementById('detail-history').innerText`), "rate limit")
	noOverflow(t, ctx, "the shadow detail view")
	act(t, ctx, chromedp.Click(chromedp.ID("detail-close")))
	waitFor(t, ctx, "the detail view closes", `!document.getElementById('detail').open`)

	// A shadow transition arrives live: the row turns open (shadow), and
	// the timeline marks it not enforced.
	report(rctx, t, app, shadowLive, "mistral large (shadow) …8b1e", cooldownv1.Outcome_OUTCOME_OVERLOADED, 529, "overloaded_error", 0)
	waitFor(t, ctx, "the shadow row turns open", rowState(shadowLive)+` === 'open' && `+shadowTag(shadowLive)+` === 'shadow'`)
	waitFor(t, ctx, "its why is the server's", text(rowSel(shadowLive)+` .c-why .why-text`)+`.startsWith('overloaded (529): cooling down for ')`)
	openRow(t, ctx, shadowLive)
	waitFor(t, ctx, "the live shadow transition in the timeline", `document.getElementById('detail').open && document.getElementById('detail-events').innerText.includes('closed → open (overload) after a 529 overloaded [shadow: not enforced]')`)
	assert.Contains(t, eval[string](t, ctx, `document.getElementById('detail-fleet').innerText`), "Throttle probability\n50 % (applies once closed)")
	noOverflow(t, ctx, "the live shadow detail view")
	act(t, ctx, chromedp.Click(chromedp.ID("detail-close")))
	waitFor(t, ctx, "the detail view closes", `!document.getElementById('detail').open`)
}

// TestDashboardShadowPolicy runs the server with a shadow policy, nothing
// rewritten: a breaker tripped by transient failures is open, marked
// shadow, and said not to be enforced (Admit still allows, with the reason
// it would have denied), and its transition is marked shadow in the
// timeline and the history.
func TestDashboardShadowPolicy(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprintf("%dpx", w), func(t *testing.T) { shadowPolicyAt(t, w) })
	}
}

func shadowPolicyAt(t *testing.T, width int64) {
	ctx := browser(t, width)
	p := breaker.DefaultPolicy()
	p.OpenBase, p.OpenMax = 2*time.Minute, 10*time.Minute
	p.Shadow = true
	srv := &liveServer{t: t, Server: servertest.Start(t, servertest.WithPolicy(p), servertest.WithAuth(servertest.Tokens(t)),
		servertest.WithServerOptions(func(o *server.Options) { o.Heartbeat = time.Second }))}
	app, _ := srv.client(clientToken)
	rctx := t.Context()
	id := servertest.NewID()
	const label = "openai gpt-5 (new policy) …c0de"
	report(rctx, t, app, id, label, cooldownv1.Outcome_OUTCOME_SUCCESS, 200, "", 0)

	act(t, ctx, chromedp.Navigate(srv.URL+"/"))
	act(t, ctx, chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), viewerToken),
		chromedp.Click(chromedp.ID("token-submit")))
	waitFor(t, ctx, "the closed shadow row", rowState(id)+` === 'closed' && `+text(rowSel(id)+` .c-state .tag.shadow`)+` === 'shadow'`)
	waitFor(t, ctx, "its why says its denials are not enforced", text(rowSel(id)+` .c-why .why-text`)+` === "shadow mode: the policy's denials are not enforced, calls are allowed"`)

	for i := range 5 {
		report(rctx, t, app, id, label, cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, 502+uint32(i%2), "", 0)
	}
	waitFor(t, ctx, "the shadow trip shows open and not enforced", rowState(id)+` === 'open' && `+text(rowSel(id)+` .c-state .tag.shadow`)+` === 'shadow' && `+
		text(rowSel(id)+` .c-why .why-text`)+`.startsWith('5 consecutive failures') && `+text(rowSel(id)+` .c-why .why-text`)+`.endsWith("; shadow mode: the policy's denials are not enforced, calls are allowed")`)
	adm, err := app.Admit(rctx, connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: id}}}))
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, adm.Msg.GetDecision(), "a shadow policy denies nothing")
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_OPEN, adm.Msg.GetShadowDenyReason())
	noOverflow(t, ctx, "the shadow row")

	openRow(t, ctx, id)
	waitFor(t, ctx, "the detail view with the shadow transition", `document.getElementById('detail').open && !!document.querySelector('#detail-history .tag.shadow') && document.getElementById('detail-policy').textContent.includes('Shadow')`)
	assert.True(t, strings.HasPrefix(eval[string](t, ctx, text(`#detail-why`)), "Open: 5 consecutive failures"))
	assert.Contains(t, eval[string](t, ctx, text(`#detail-why`)), "shadow mode: the policy's denials are not enforced, calls are allowed.")
	assert.Contains(t, eval[string](t, ctx, `document.getElementById('detail-events').innerText`), "closed → open (breaker) after a 502 transient failure [shadow: not enforced]")
	assert.Contains(t, eval[string](t, ctx, `document.getElementById('detail-policy').innerText`), "Shadow\non: computed and published, not enforced")
	assert.Contains(t, eval[string](t, ctx, `document.getElementById('detail-fields').innerText`), "Shadow\nyes: this state is not enforced, calls are allowed")
	noOverflow(t, ctx, "the shadow detail view")
}
