package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

func pending(name string, lease bool, o cooldownv1.Outcome, hint time.Duration, at time.Time) *pendingReport {
	req := &cooldownv1.ReportRequest{Outcome: o, ErrorCode: name}
	if lease {
		req.LeaseToken = "tok-" + name
	}
	if hint > 0 {
		req.RetryAfter = durationpb.New(hint)
	}
	return &pendingReport{req: req, hint: hint, observed: at}
}

func drain(q *reportQueue, now time.Time) []string {
	var out []string
	for {
		p, ok := q.next(now)
		if !ok {
			return out
		}
		q.settled(true)
		out = append(out, p.req.GetErrorCode())
	}
}

func TestReportQueueOrderAndBound(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	fail := cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE
	q := newReportQueue(3, time.Minute)
	assert.True(t, q.push(pending("p1", false, fail, 0, now), false), "the first push starts the sender")
	assert.False(t, q.push(pending("p2", false, fail, 0, now), false), "one sender at a time")
	q.push(pending("l1", true, fail, 0, now), false)
	q.push(pending("p3", false, fail, 0, now), false)
	q.push(pending("l2", true, fail, 0, now), false)
	st := q.snapshot()
	assert.Equal(t, 3, st.Len)
	assert.Equal(t, uint64(5), st.Queued)
	assert.Equal(t, uint64(2), st.Dropped, "the oldest reports without a lease go first")
	assert.Equal(t, []string{"l1", "l2", "p3"}, drain(q, now), "leases first, then oldest first")
	assert.Equal(t, uint64(3), q.snapshot().Delivered)

	_, ok := q.next(now)
	assert.False(t, ok)
	assert.True(t, q.push(pending("p4", false, fail, 0, now), false), "an empty queue's sender stopped; the next push starts one")
}

func TestReportQueueLeasesDroppedLast(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	fail := cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE
	q := newReportQueue(2, time.Minute)
	for _, n := range []string{"l1", "l2", "l3"} {
		q.push(pending(n, true, fail, 0, now), false)
	}
	assert.Equal(t, []string{"l2", "l3"}, drain(q, now))
}

func TestReportQueueRequeueKeepsPlace(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	fail := cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE
	q := newReportQueue(10, time.Minute)
	q.push(pending("a", false, fail, 0, now), false)
	q.push(pending("b", false, fail, 0, now), false)
	p, ok := q.next(now)
	require.True(t, ok)
	assert.Equal(t, 2, q.snapshot().Len, "the report in flight still counts")
	q.push(p, true) // the send failed
	assert.Equal(t, uint64(2), q.snapshot().Queued, "a report sent back is not queued twice")
	assert.Equal(t, []string{"a", "b"}, drain(q, now))
}

func TestPendingReportStale(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	const (
		success = cooldownv1.Outcome_OUTCOME_SUCCESS
		limited = cooldownv1.Outcome_OUTCOME_RATE_LIMITED
		quota   = cooldownv1.Outcome_OUTCOME_QUOTA_EXHAUSTED
		fail    = cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE
	)
	tests := []struct {
		name  string
		p     *pendingReport
		age   time.Duration
		stale bool
		left  time.Duration // the retry_after sent, when not stale
	}{
		{name: "fresh failure", p: pending("x", false, fail, 0, t0), age: time.Second},
		{name: "old failure", p: pending("x", false, fail, 0, t0), age: 61 * time.Second, stale: true},
		{name: "old lease", p: pending("x", true, success, 0, t0), age: 61 * time.Second, stale: true},
		{name: "429 hint partly passed", p: pending("x", false, limited, 20*time.Second, t0), age: 5 * time.Second, left: 15 * time.Second},
		{name: "429 hint passed", p: pending("x", false, limited, 20*time.Second, t0), age: 20 * time.Second, stale: true},
		{name: "proactive hint passed", p: pending("x", false, success, 2*time.Second, t0), age: 3 * time.Second, stale: true},
		{name: "lease with a passed hint is still sent", p: pending("x", true, limited, 2*time.Second, t0), age: 3 * time.Second, left: time.Millisecond},
		{name: "quota block outlives its hint", p: pending("x", false, quota, 2*time.Second, t0), age: 3 * time.Second, left: time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			now := t0.Add(tt.age)
			assert.Equal(t, tt.stale, tt.p.stale(now, time.Minute))
			if !tt.stale {
				assert.Equal(t, tt.left, tt.p.request(now).GetRetryAfter().AsDuration())
			}
		})
	}
}
