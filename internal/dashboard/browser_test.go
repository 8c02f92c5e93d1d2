package dashboard_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cooldownd/cooldownd/internal/logtest"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// maxWait bounds every wait for the page to show a change.
const maxWait = 5 * time.Second

// chromium finds Debian's chromium, or skips loudly (fails under
// COOLDOWN_REQUIRE_REAL=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	redistest.Missing(t, "chromium")
	return ""
}

// browser starts a headless chromium bound to the test and returns a tab.
// Console messages and page exceptions go to the test log; an uncaught
// exception fails the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := chromium(t)
	dir := t.TempDir()
	tmp := filepath.Join(dir, "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o700))
	var out syncBuffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in containers
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.WindowSize(1280, 800),
		chromedp.Env("TMPDIR="+tmp),
		chromedp.CombinedOutput(&out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		if t.Failed() && out.Len() > 0 {
			t.Logf("chromium output:\n%s", out.String())
		}
	})
	start := time.Now()
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	t.Logf("chromium started in %v", time.Since(start).Round(time.Millisecond))

	var mu sync.Mutex
	var exceptions []string
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			t.Logf("console %s: %s", m.Type, m.String())
			if m.IsException() {
				mu.Lock()
				exceptions = append(exceptions, m.String())
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, exceptions, "the page threw")
	})
	return ctx
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, "evaluate %s", expr)
	return v
}

// waitFor polls a JavaScript predicate until it holds, for at most maxWait,
// and returns how long that took.
func waitFor(t *testing.T, ctx context.Context, what, expr string) time.Duration {
	t.Helper()
	start := time.Now()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(maxWait), chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('main') ? document.querySelector('main').innerText : ''`))
		live, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('live') ? document.getElementById('live').innerText : ''`))
		t.Fatalf("%s: not within %v (%v)\nstatus: %s\npage:\n%s", what, maxWait, err, live, html)
	}
	return time.Since(start)
}

func act(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	require.NoError(t, chromedp.Do(tctx, steps...))
}

func rowSel(id []byte) string { return `tr[data-id="` + hex.EncodeToString(id) + `"]` }

// rowState is a JavaScript expression: the state shown in the row of id.
func rowState(id []byte) string {
	return `(document.querySelector('` + rowSel(id) + `') || {dataset: {}}).dataset.state`
}

// TestDashboardInBrowser drives the dashboard in headless chromium: sign in,
// see a connection open live without a reload, reset it as an admin with a
// confirmation, follow a server restart, and check a viewer gets no admin
// buttons.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	srv := newLiveServer(t, testAuth(t))
	app, _ := srv.client(clientToken)
	_, adminAPI := srv.client(adminToken)
	rctx := t.Context()

	// Some connections in every state, for the rows and the screenshot.
	ok := func(id []byte, label string, n int) {
		for range n {
			report(rctx, t, app, id, label, cooldownv1.Outcome_OUTCOME_SUCCESS, 200, "", 0)
		}
	}
	gpt := newID(t)
	ok(gpt, "openai gpt-4o …a1b2", 7)
	target := newID(t)
	ok(target, "openai gpt-4.1 …5e21", 3)
	quota := newID(t)
	ok(quota, "anthropic claude-sonnet-4 …9f3c", 2)
	report(rctx, t, app, quota, "anthropic claude-sonnet-4 …9f3c", cooldownv1.Outcome_OUTCOME_QUOTA_EXHAUSTED, 429, "insufficient_quota", 0)
	flaky := newID(t)
	ok(flaky, "bedrock claude eu-west-1 …0c4e", 4)
	report(rctx, t, app, flaky, "bedrock claude eu-west-1 …0c4e", cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, 503, "", 0)
	report(rctx, t, app, flaky, "bedrock claude eu-west-1 …0c4e", cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, 502, "", 0)
	forced := newID(t)
	ok(forced, "gemini-2.5-pro us-central1 …77d0", 1)
	_, err := adminAPI.ForceConnection(rctx, connect.NewRequest(&cooldownv1.ForceConnectionRequest{
		Id: forced, Override: cooldownv1.Override_OVERRIDE_FORCED_OPEN, Duration: durationpb.New(15 * time.Minute), Reason: "provider maintenance",
	}))
	require.NoError(t, err)
	probing := newID(t)
	report(rctx, t, app, probing, "azure gpt-4o-mini eastus …3d9a", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, "rate_limit_exceeded", 500*time.Millisecond)
	probeReady := time.Now().Add(600 * time.Millisecond)
	const rows = 6

	// Sign in with the admin token through the prompt.
	act(t, ctx, chromedp.Navigate(srv.URL()+"/"))
	act(t, ctx, chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), adminToken),
		chromedp.Click(chromedp.ID("token-submit")))
	waitFor(t, ctx, "the table lists every connection", fmt.Sprintf(`document.querySelectorAll('#rows tr').length === %d`, rows))
	waitFor(t, ctx, "the status says live", `document.getElementById('live').dataset.state === 'up'`)
	assert.Equal(t, "admin", eval[string](t, ctx, `document.querySelector('.chip.role-admin').textContent`))
	assert.Equal(t, "open", eval[string](t, ctx, rowState(forced)))
	assert.Contains(t, eval[string](t, ctx, `document.querySelector('`+rowSel(forced)+` .c-state').textContent`), "forced")
	assert.Equal(t, "quota", eval[string](t, ctx, `document.querySelector('`+rowSel(quota)+` .c-cause').textContent`))
	// The token stays in this tab's sessionStorage, never in the page.
	assert.Equal(t, adminToken, eval[string](t, ctx, `sessionStorage.getItem('cooldownd.token')`))
	assert.NotContains(t, eval[string](t, ctx, `document.documentElement.outerHTML`), adminToken)

	// The recovering connection: its open period ends, the next Admit takes
	// the probe, and the row turns half-open with a probe in flight.
	time.Sleep(time.Until(probeReady))
	adm, err := app.Admit(rctx, connect.NewRequest(&cooldownv1.AdmitRequest{Candidates: []*cooldownv1.Connection{{Id: probing}}}))
	require.NoError(t, err)
	require.Equal(t, cooldownv1.Decision_DECISION_ALLOW_PROBE, adm.Msg.GetDecision())
	waitFor(t, ctx, "the probing row turns half-open with its probe", rowState(probing)+` === 'half-open' && document.querySelector('`+rowSel(probing)+` .c-probe').textContent.startsWith('1 · ')`)

	// Drive the target open through the API; the row follows without a
	// reload.
	require.Equal(t, "closed", eval[string](t, ctx, rowState(target)))
	eval[int](t, ctx, `window.__sameDocument = 1`)
	res := report(rctx, t, app, target, "openai gpt-4.1 …5e21", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, "rate_limit_exceeded", 30*time.Second)
	require.True(t, res.GetChanged())
	took := waitFor(t, ctx, "the row turns open", rowState(target)+` === 'open'`)
	t.Logf("open shown %v after the report", took.Round(time.Millisecond))
	assert.Less(t, took, time.Second, "updates within one second of a state change")
	assert.Equal(t, 1, eval[int](t, ctx, `window.__sameDocument`), "no reload")
	assert.Equal(t, "rate limit", eval[string](t, ctx, `document.querySelector('`+rowSel(target)+` .c-cause').textContent`))
	left := `document.querySelector('` + rowSel(target) + ` .c-left').textContent`
	first := eval[string](t, ctx, left)
	require.Regexp(t, `^[23]\ds$`, first)
	waitFor(t, ctx, "time left counts down", left+` !== '`+first+`'`)

	// The screenshot: for debugging, and for the docs when asked.
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(t.TempDir(), "dashboard.png"), shot, 0o600))
	if os.Getenv("UPDATE_SCREENSHOT") == "1" {
		require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "img", "dashboard.png"), shot, 0o644))
		t.Log("wrote docs/img/dashboard.png")
	}

	// Reset as admin, through the confirmation.
	act(t, ctx, chromedp.Click(chromedp.CSS(rowSel(target)+` button[data-action="reset"]`)))
	waitFor(t, ctx, "the confirmation opens", `document.getElementById('confirm').open`)
	assert.Equal(t, "open", eval[string](t, ctx, rowState(target)), "nothing happens before confirming")
	act(t, ctx, chromedp.SendKeys(chromedp.ID("confirm-reason"), "browser test"),
		chromedp.Click(chromedp.ID("confirm-ok")))
	waitFor(t, ctx, "the row turns closed", rowState(target)+` === 'closed'`)
	// The live stream may update the row before the Reset call itself
	// returns and closes the dialog: wait for both.
	waitFor(t, ctx, "the confirmation closes", `!document.getElementById('confirm').open`)
	cd, _ := srv.client(viewerToken)
	got, err := cd.GetConnection(rctx, connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: target, HistoryLimit: 1}))
	require.NoError(t, err)
	require.Equal(t, cooldownv1.State_STATE_CLOSED, got.Msg.GetConnection().GetState())
	require.Len(t, got.Msg.GetHistory(), 1)
	assert.Equal(t, cooldownv1.Cause_CAUSE_RESET, got.Msg.GetHistory()[0].GetCause())
	assert.Equal(t, "ops-admin", got.Msg.GetHistory()[0].GetActor())
	assert.Equal(t, "browser test", got.Msg.GetHistory()[0].GetReason())

	// The keyboard opens the detail view, with the transitions.
	act(t, ctx, chromedp.Focus(chromedp.CSS(rowSel(target))), chromedp.KeyEvent("\r"))
	waitFor(t, ctx, "the detail view opens with its history", `document.getElementById('detail').open && document.querySelectorAll('#detail-history tr').length >= 2`)
	hist := eval[string](t, ctx, `document.getElementById('detail-history').innerText`)
	assert.Contains(t, hist, "open → closed")
	assert.Contains(t, hist, "reset")
	assert.Contains(t, hist, "ops-admin: browser test")
	assert.Contains(t, hist, "closed → open")
	assert.Contains(t, hist, "rate limit")
	act(t, ctx, chromedp.Click(chromedp.ID("detail-close")))
	waitFor(t, ctx, "the detail view closes", `!document.getElementById('detail').open`)

	// A server restart: the page reconnects by itself and follows again.
	srv.restart()
	waitFor(t, ctx, "the status notices the restart", `document.getElementById('live').dataset.state !== 'up'`)
	waitFor(t, ctx, "the status is live again", `document.getElementById('live').dataset.state === 'up'`)
	report(rctx, t, app, target, "openai gpt-4.1 …5e21", cooldownv1.Outcome_OUTCOME_OVERLOADED, 529, "overloaded_error", 0)
	took = waitFor(t, ctx, "the row turns open after the restart", rowState(target)+` === 'open'`)
	t.Logf("open shown %v after the report, after a restart", took.Round(time.Millisecond))

	// A viewer sees the same table and no admin buttons.
	act(t, ctx, chromedp.Click(chromedp.ID("signout")))
	act(t, ctx, chromedp.WaitVisible(chromedp.ID("token-input")),
		chromedp.SendKeys(chromedp.ID("token-input"), clientToken),
		chromedp.Click(chromedp.ID("token-submit")))
	waitFor(t, ctx, "a client token is refused", `document.getElementById('login-error').textContent.includes('viewer or admin')`)
	act(t, ctx, chromedp.SendKeys(chromedp.ID("token-input"), viewerToken),
		chromedp.Click(chromedp.ID("token-submit")))
	waitFor(t, ctx, "the viewer's table", fmt.Sprintf(`document.querySelectorAll('#rows tr').length === %d && !!document.querySelector('.chip.role-viewer')`, rows))
	assert.Equal(t, 0, eval[int](t, ctx, `document.querySelectorAll('[data-action]').length`), "no admin buttons for a viewer")
	assert.False(t, eval[bool](t, ctx, `document.body.classList.contains('is-admin')`))
	act(t, ctx, chromedp.Click(chromedp.CSS(rowSel(target)+` .c-label`)))
	waitFor(t, ctx, "the viewer's detail view", `document.getElementById('detail').open && document.querySelectorAll('#detail-history tr').length >= 2`)
	assert.Equal(t, 0, eval[int](t, ctx, `document.querySelectorAll('[data-action]').length`), "no admin buttons in the detail view")
}

// TestDashboardEmptyState checks the first-run page: auth off, no
// connections, and the curl that sends a first Admit.
func TestDashboardEmptyState(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	srv := newLiveServer(t, nil)
	act(t, ctx, chromedp.Navigate(srv.URL()+"/"))
	waitFor(t, ctx, "the empty state", `!document.getElementById('empty').hidden`)
	curl := eval[string](t, ctx, `document.getElementById('empty-curl').textContent`)
	assert.Contains(t, curl, srv.URL()+"/cooldown.v1.CooldownService/Admit")
	assert.Contains(t, curl, "Content-Type: application/json")
	assert.NotContains(t, curl, "Authorization", "auth is off")
	assert.True(t, eval[bool](t, ctx, `!!document.querySelector('.chip.warn')`), "auth off is flagged")
	assert.True(t, eval[bool](t, ctx, `document.getElementById('signout').hidden`))

	// The first report appears live, and everyone is admin with auth off.
	app, _ := srv.client("")
	id := newID(t)
	report(t.Context(), t, app, id, "openai gpt-4o", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, "", 30*time.Second)
	waitFor(t, ctx, "the first row", rowState(id)+` === 'open'`)
	assert.True(t, eval[bool](t, ctx, `document.getElementById('empty').hidden`))
	assert.Equal(t, 3, eval[int](t, ctx, `document.querySelectorAll('`+rowSel(id)+` [data-action]').length`))

	// Filter and sort.
	other := newID(t)
	report(t.Context(), t, app, other, "anthropic claude", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, "", 0)
	waitFor(t, ctx, "two rows", `document.querySelectorAll('#rows tr').length === 2`)
	act(t, ctx, chromedp.SendKeys(chromedp.ID("filter"), "claude"))
	waitFor(t, ctx, "the filter keeps one row", `document.querySelectorAll('#rows tr').length === 1 && !!document.querySelector('`+rowSel(other)+`')`)
	act(t, ctx, chromedp.KeyEvent(kb.Escape))
	waitFor(t, ctx, "Escape clears the filter", `document.querySelectorAll('#rows tr').length === 2 && document.getElementById('filter').value === ''`)
	// By default open sorts first; by label, "anthropic" comes first.
	assert.Equal(t, hex.EncodeToString(id), eval[string](t, ctx, `document.querySelector('#rows tr').dataset.id`))
	act(t, ctx, chromedp.Click(chromedp.CSS(`button[data-sort="label"]`)))
	waitFor(t, ctx, "sorted by label", `document.querySelector('#rows tr').dataset.id === '`+hex.EncodeToString(other)+`'`)
	assert.Equal(t, "ascending", eval[string](t, ctx, `document.querySelector('th[data-key="label"]').getAttribute('aria-sort')`))
}

type syncBuffer = logtest.Buffer
