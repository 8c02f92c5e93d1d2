package main

import (
	"bytes"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/servertest"
)

// TestPrintsTheServersExplanation: get and list print the explanation the
// server computed (ConnectionState.explanation), the operator's reason of
// a forced state included, and list sorts by its severity.
func TestPrintsTheServersExplanation(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, forced := s.rateLimited(t)
	failing := servertest.NewID()
	s.report(t, failing, "failing", cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, 503, 0)
	r := s.ctl(t, admin(), "force", forced, "open", "--for", "10m", "--reason", "provider incident")
	require.NoError(t, r.err, r.stderr)

	r = s.ctl(t, viewer(), "get", forced)
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `\nWhy\s+forced open by \S+: provider incident\n`, r.stdout)

	r = s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `forced open by \S+: provider incident$`, lineWith(t, r.stdout, forced[:8]))
	assert.Regexp(t, `1 of 5 consecutive failures`, lineWith(t, r.stdout, hex.EncodeToString(failing)[:8]))
}

// TestExplanationIsOnlyDisplayed: whatever the server explains is what
// get, list and their order show; nothing is derived again here.
func TestExplanationIsOnlyDisplayed(t *testing.T) {
	t.Parallel()
	ts := servertest.Start(t, servertest.WithProtocol(servertest.HTTP1), servertest.WithAuth(servertest.Tokens(t)))
	hc := &http.Client{Transport: bearerTransport{base: http.DefaultTransport, token: servertest.ClientToken}}
	s := &testServer{url: ts.URL, app: cooldownv1connect.NewCooldownServiceClient(hc, ts.URL)}
	healthy, open := servertest.NewID(), servertest.NewID()
	s.report(t, healthy, "healthy", cooldownv1.Outcome_OUTCOME_SUCCESS, 200, 0)
	s.report(t, open, "open", cooldownv1.Outcome_OUTCOME_RATE_LIMITED, 429, time.Minute)
	patchAnswers(t, ts, edits{
		state: func(c *cooldownv1.ConnectionState) {
			if bytes.Equal(c.GetConnection().GetId(), healthy) {
				c.Explanation = &cooldownv1.Explanation{Severity: 0, Reasons: []string{"the server says so", "and this too"}}
			}
		},
		transition: func([]byte, *cooldownv1.Transition) {},
		policy:     func([]byte, *cooldownv1.Policy) {},
	})
	r := s.ctl(t, viewer(), "get", hex.EncodeToString(healthy))
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `\nWhy\s+the server says so\n\s+and this too\n`, r.stdout)

	r = s.ctl(t, viewer(), "list")
	require.NoError(t, r.err, r.stderr)
	assert.Regexp(t, `the server says so; and this too$`, lineWith(t, r.stdout, hex.EncodeToString(healthy)[:8]))
	assert.Less(t, bytes.Index([]byte(r.stdout), []byte(hex.EncodeToString(healthy)[:8])), bytes.Index([]byte(r.stdout), []byte(hex.EncodeToString(open)[:8])),
		"the server's severity orders the list")
}
