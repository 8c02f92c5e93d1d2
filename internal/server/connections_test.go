package server_test

import (
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
)

// listAll pages through every connection and returns the pages.
func listAll(t *testing.T, c cooldownv1connect.CooldownServiceClient, size uint32) [][]*cooldownv1.ConnectionState {
	t.Helper()
	var pages [][]*cooldownv1.ConnectionState
	token := ""
	for range 100 {
		res, err := c.ListConnections(t.Context(), connect.NewRequest(&cooldownv1.ListConnectionsRequest{PageSize: size, PageToken: token}))
		require.NoError(t, err)
		pages = append(pages, res.Msg.GetConnections())
		token = res.Msg.GetNextPageToken()
		if token == "" {
			return pages
		}
	}
	t.Fatal("listing did not end after 100 pages")
	return nil
}

func ids(states []*cooldownv1.ConnectionState) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = hex.EncodeToString(s.GetConnection().GetId())
	}
	return out
}

func TestListConnectionsPagination(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.cooldown(p.opts...)
			var want []string
			for range 7 {
				id := newID()
				rateLimit(t, c, id, time.Minute)
				want = append(want, hex.EncodeToString(id))
			}
			slices.Sort(want)

			pages := listAll(t, c, 3)
			require.Len(t, pages, 3)
			assert.Len(t, pages[0], 3)
			assert.Len(t, pages[1], 3)
			assert.Len(t, pages[2], 1)
			var got []string
			for _, pg := range pages {
				got = append(got, ids(pg)...)
			}
			assert.Equal(t, want, got, "every connection once, ordered by id")
			for _, s := range pages[0] {
				assert.Equal(t, cooldownv1.State_STATE_OPEN, s.GetState())
				assert.Equal(t, cooldownv1.Cause_CAUSE_RATE_LIMIT, s.GetCause())
				assert.Equal(t, time.Minute, s.GetRetryAfter().AsDuration())
				assert.EqualValues(t, 429, s.GetLastHttpStatus())
				assert.Equal(t, "rate_limit_exceeded", s.GetLastErrorCode())
			}

			// The default page size holds them all.
			all := listAll(t, c, 0)
			require.Len(t, all, 1)
			assert.Equal(t, want, ids(all[0]))
		})
	}
}

// TestListConnectionsSkipsExpiredPages: when a whole page of the index has
// expired, listing goes on past it instead of ending early.
func TestListConnectionsSkipsExpiredPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withIdleTTL(time.Minute))
	c := e.cooldown()
	var all []string
	for range 7 {
		id := newID()
		rateLimit(t, c, id, time.Second)
		all = append(all, hex.EncodeToString(id))
	}
	slices.Sort(all)
	e.advance(2 * time.Minute) // every connection's state expires
	// The last two by id come back.
	var want []string
	for _, h := range all[5:] {
		id, err := hex.DecodeString(h)
		require.NoError(t, err)
		rateLimit(t, c, id, time.Second)
		want = append(want, h)
	}

	var got []string
	for _, pg := range listAll(t, c, 2) {
		got = append(got, ids(pg)...)
	}
	assert.Equal(t, want, got)
}

func TestGetConnectionHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.cooldown(connect.WithGRPC())
	id := newID()

	unknown, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id, HistoryLimit: 50}))
	require.NoError(t, err)
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, unknown.Msg.GetConnection().GetState())
	assert.Zero(t, unknown.Msg.GetConnection().GetRevision())
	assert.Empty(t, unknown.Msg.GetHistory())

	_, err = c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: &cooldownv1.Connection{Id: id, Label: "openai gpt-4o …a1b2"},
		Outcome:    cooldownv1.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: durationpb.New(5 * time.Second),
	}))
	require.NoError(t, err)
	e.advance(5 * time.Second)
	probe := admit(t, c, id)
	require.Equal(t, cooldownv1.Decision_DECISION_ALLOW_PROBE, probe.GetDecision())
	_, err = c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
		Connection: conn(id), LeaseToken: probe.GetLeaseToken(), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS,
	}))
	require.NoError(t, err)

	res, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id, HistoryLimit: 50}))
	require.NoError(t, err)
	st := res.Msg.GetConnection()
	assert.Equal(t, cooldownv1.State_STATE_CLOSED, st.GetState())
	assert.Equal(t, cooldownv1.Cause_CAUSE_PROBE_SUCCESS, st.GetCause())
	// The first transition's revision is its time in ms; later ones add one.
	r := uint64(t0.UnixMilli())
	assert.Equal(t, r+2, st.GetRevision())
	assert.Equal(t, "openai gpt-4o …a1b2", st.GetConnection().GetLabel())
	assert.Equal(t, id, st.GetConnection().GetId())

	type step struct {
		from, to cooldownv1.State
		cause    cooldownv1.Cause
		rev      uint64
		at       time.Time
	}
	want := []step{ // newest first
		{cooldownv1.State_STATE_HALF_OPEN, cooldownv1.State_STATE_CLOSED, cooldownv1.Cause_CAUSE_PROBE_SUCCESS, r + 2, t0.Add(5 * time.Second)},
		{cooldownv1.State_STATE_OPEN, cooldownv1.State_STATE_HALF_OPEN, cooldownv1.Cause_CAUSE_OPEN_EXPIRED, r + 1, t0.Add(5 * time.Second)},
		{cooldownv1.State_STATE_CLOSED, cooldownv1.State_STATE_OPEN, cooldownv1.Cause_CAUSE_RATE_LIMIT, r, t0},
	}
	require.Len(t, res.Msg.GetHistory(), len(want))
	for i, w := range want {
		h := res.Msg.GetHistory()[i]
		assert.Equal(t, w, step{h.GetFrom(), h.GetTo(), h.GetCause(), h.GetRevision(), h.GetTime().AsTime()}, "history[%d]", i)
		assert.Equal(t, id, h.GetConnection().GetId())
	}

	// history_limit bounds it; 0 returns none.
	res, err = c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id, HistoryLimit: 1}))
	require.NoError(t, err)
	require.Len(t, res.Msg.GetHistory(), 1)
	assert.Equal(t, r+2, res.Msg.GetHistory()[0].GetRevision())
	res, err = c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id}))
	require.NoError(t, err)
	assert.Empty(t, res.Msg.GetHistory())
}

func TestForceConnectionExpires(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c, a := e.cooldown(p.opts...), e.admin(p.opts...)
			id := newID()

			res, err := a.ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{
				Id: id, Override: cooldownv1.Override_OVERRIDE_FORCED_OPEN, Duration: durationpb.New(10 * time.Second), Reason: "provider incident",
			}))
			require.NoError(t, err)
			st := res.Msg.GetConnection()
			assert.Equal(t, cooldownv1.State_STATE_OPEN, st.GetState())
			assert.Equal(t, cooldownv1.Override_OVERRIDE_FORCED_OPEN, st.GetOverride())
			assert.Equal(t, t0.Add(10*time.Second), st.GetOverrideUntil().AsTime())

			d := admit(t, c, id)
			assert.Equal(t, cooldownv1.Decision_DECISION_DENY, d.GetDecision())
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_FORCED_OPEN, d.GetDenyReason())
			assert.Equal(t, 10*time.Second, d.GetRetryAfter().AsDuration())

			// A success does not lift an override.
			_, err = c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn(id), Revision: d.GetRevision(), Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS}))
			require.NoError(t, err)
			e.advance(9 * time.Second)
			assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_FORCED_OPEN, admit(t, c, id).GetDenyReason())

			// After the duration it returns to normal by itself: recovery
			// starts with a probe.
			e.advance(time.Second)
			d = admit(t, c, id)
			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW_PROBE, d.GetDecision())
			got, err := c.GetConnection(t.Context(), connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: id, HistoryLimit: 2}))
			require.NoError(t, err)
			assert.Equal(t, cooldownv1.Override_OVERRIDE_UNSPECIFIED, got.Msg.GetConnection().GetOverride())
			require.Len(t, got.Msg.GetHistory(), 2)
			assert.Equal(t, cooldownv1.Cause_CAUSE_FORCE_EXPIRED, got.Msg.GetHistory()[0].GetCause())
			forced := got.Msg.GetHistory()[1]
			assert.Equal(t, cooldownv1.Cause_CAUSE_FORCED, forced.GetCause())
			assert.Equal(t, "anonymous", forced.GetActor())
			assert.Equal(t, "provider incident", forced.GetReason())
		})
	}
}

func TestForceClosedIgnoresFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, a := e.cooldown(), e.admin()
	id := newID()
	_, err := a.ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{Id: id, Override: cooldownv1.Override_OVERRIDE_FORCED_CLOSED}))
	require.NoError(t, err)
	for range 5 {
		rateLimit(t, c, id, time.Minute)
	}
	assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, admit(t, c, id).GetDecision())

	// Clearing the override (OVERRIDE_UNSPECIFIED) returns it to normal.
	_, err = a.ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{Id: id}))
	require.NoError(t, err)
	rateLimit(t, c, id, time.Minute)
	assert.Equal(t, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, admit(t, c, id).GetDenyReason())
}

// TestForceSubMillisecond: a positive duration under a millisecond is not
// "until changed".
func TestForceSubMillisecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, a := e.cooldown(), e.admin()
	id := newID()
	res, err := a.ForceConnection(t.Context(), connect.NewRequest(&cooldownv1.ForceConnectionRequest{
		Id: id, Override: cooldownv1.Override_OVERRIDE_FORCED_OPEN, Duration: durationpb.New(500 * time.Microsecond),
	}))
	require.NoError(t, err)
	require.NotNil(t, res.Msg.GetConnection().GetOverrideUntil())
	e.advance(time.Millisecond)
	assert.NotEqual(t, cooldownv1.DenyReason_DENY_REASON_FORCED_OPEN, admit(t, c, id).GetDenyReason())
}

func TestResetConnection(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c, a := e.cooldown(p.opts...), e.admin(p.opts...)
			id := newID()
			before := admit(t, c, id)
			rateLimit(t, c, id, time.Hour)
			denied := admit(t, c, id)
			require.Equal(t, cooldownv1.Decision_DECISION_DENY, denied.GetDecision())

			res, err := a.ResetConnection(t.Context(), connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: id, Reason: "key rotated"}))
			require.NoError(t, err)
			st := res.Msg.GetConnection()
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, st.GetState())
			assert.Equal(t, cooldownv1.Cause_CAUSE_RESET, st.GetCause())
			assert.Equal(t, denied.GetRevision()+1, st.GetRevision())
			assert.Nil(t, st.GetRetryAfter())

			assert.Equal(t, cooldownv1.Decision_DECISION_ALLOW, admit(t, c, id).GetDecision())
			// A failure admitted before the reset is stale for the breaker.
			rep, err := c.Report(t.Context(), connect.NewRequest(&cooldownv1.ReportRequest{
				Connection: conn(id), Revision: before.GetRevision(), Outcome: cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE,
			}))
			require.NoError(t, err)
			assert.False(t, rep.Msg.GetAccepted())
		})
	}
}

func TestWatchConnections(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.cooldown(p.opts...)
			existing := map[string]bool{}
			for range 3 {
				id := newID()
				rateLimit(t, c, id, time.Minute)
				existing[hex.EncodeToString(id)] = true
			}

			stream, err := c.WatchConnections(t.Context(), connect.NewRequest(&cooldownv1.WatchConnectionsRequest{Snapshot: true}))
			require.NoError(t, err)
			t.Cleanup(func() { _ = stream.Close() })
			msgs := make(chan *cooldownv1.WatchConnectionsResponse, 16)
			go func() {
				defer close(msgs)
				for stream.Receive() {
					if stream.Msg().GetConnection() == nil {
						continue // a heartbeat
					}
					msgs <- stream.Msg()
				}
			}()
			next := func(within time.Duration) *cooldownv1.WatchConnectionsResponse {
				t.Helper()
				select {
				case m, ok := <-msgs:
					if !ok {
						require.FailNow(t, "stream ended", "%v", stream.Err()) // safe: the receiver is done
					}
					return m
				case <-time.After(within):
					require.FailNow(t, "no message", "within %s", within)
					return nil
				}
			}

			for range len(existing) {
				m := next(5 * time.Second)
				assert.True(t, m.GetSnapshot())
				assert.Nil(t, m.GetTransition())
				id := hex.EncodeToString(m.GetConnection().GetConnection().GetId())
				assert.True(t, existing[id], "snapshot of an unknown connection %s", id)
				delete(existing, id)
			}

			id := newID()
			rateLimit(t, c, id, time.Minute)
			m := next(time.Second)
			assert.False(t, m.GetSnapshot())
			tr := m.GetTransition()
			require.NotNil(t, tr)
			assert.Equal(t, id, tr.GetConnection().GetId())
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, tr.GetFrom())
			assert.Equal(t, cooldownv1.State_STATE_OPEN, tr.GetTo())
			assert.Equal(t, cooldownv1.Cause_CAUSE_RATE_LIMIT, tr.GetCause())
			assert.Equal(t, cooldownv1.State_STATE_OPEN, m.GetConnection().GetState())
			assert.Equal(t, time.Minute, m.GetConnection().GetRetryAfter().AsDuration())

			// Closing the server ends the stream cleanly.
			e.srv.Close()
			select {
			case _, ok := <-msgs:
				assert.False(t, ok, "no further message")
			case <-time.After(5 * time.Second):
				t.Fatal("the stream did not end after Server.Close")
			}
			assert.NoError(t, stream.Err())
		})
	}
}

// TestWatchHeartbeat: an idle watch receives empty keep-alive messages.
func TestWatchHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *envOptions) { o.heartbeat = 20 * time.Millisecond })
	stream, err := e.cooldown().WatchConnections(t.Context(), connect.NewRequest(&cooldownv1.WatchConnectionsRequest{}))
	require.NoError(t, err)
	defer func() { _ = stream.Close() }()
	done := make(chan error, 1)
	go func() {
		if !stream.Receive() {
			done <- stream.Err()
			return
		}
		if stream.Msg().GetConnection() != nil || stream.Msg().GetTransition() != nil {
			done <- errors.New("a heartbeat carries no connection")
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat")
	}
}
