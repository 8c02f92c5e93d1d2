package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// batchLog is a coalesceStore that records the batches it is given and
// answers them applied, closed, at their revision.
type batchLog struct {
	mu      sync.Mutex
	batches map[keys.ID][]store.Coalesced
	fail    error
	res     func(store.Coalesced) store.ReportResult // nil: closed and healthy
	gate    chan struct{}                            // non-nil: each batch waits for it to close
	started []int64                                  // the batches' counts, as each came in
}

func (l *batchLog) ReportCoalesced(_ context.Context, c store.Conn, b store.Coalesced) (store.CoalescedResult, error) {
	l.mu.Lock()
	l.started = append(l.started, b.Count)
	l.mu.Unlock()
	if l.gate != nil {
		<-l.gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return store.CoalescedResult{}, l.fail
	}
	if l.batches == nil {
		l.batches = map[keys.ID][]store.Coalesced{}
	}
	l.batches[c.ID] = append(l.batches[c.ID], b)
	n := b.Count
	for _, k := range b.Keyed {
		n += k.Count
	}
	res := store.ReportResult{Revision: b.Revision, Phase: breaker.Closed}
	res.Accepted = true
	if l.res != nil {
		res = l.res(b)
	}
	return store.CoalescedResult{ReportResult: res, Applied: n}, nil
}

// of returns the batches applied for id.
func (l *batchLog) of(id keys.ID) []store.Coalesced {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.batches[id])
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// healthyAnswer is the store's answer to a success applied at once on a
// closed, healthy connection at rev.
func healthyAnswer(rev uint64, at time.Time) store.ReportResult {
	r := store.ReportResult{Revision: rev, Phase: breaker.Closed, Now: at}
	r.Accepted = true
	return r
}

func cid(b byte) keys.ID {
	var id keys.ID
	id[0], id[31] = b, 0xc5
	return id
}

var okReport = breaker.Report{Revision: 7, Outcome: breaker.OutcomeSuccess, HTTPStatus: 200}

// TestCoalesceTakesOnlyHealthySuccesses: a replica holds a report for the
// next flush only when it is a success without a lease or a hint, at the
// revision a success's answer showed closed with no throttle; failures,
// hints, probes, another revision, a connection not learned yet, one whose
// last report at once was a failure, one whose answer showed a throttle or
// a state not closed: all go to the store at once. Fails if any of them is
// held (a failure or a probe would then wait an interval).
func TestCoalesceTakesOnlyHealthySuccesses(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	c := store.Conn{Tenant: "t", ID: cid(1)}
	with := func(f func(*breaker.Report)) breaker.Report { r := okReport; f(&r); return r }
	cases := []struct {
		name    string
		learned []breaker.Report          // reports applied at once before, answered by answer
		answer  func() store.ReportResult // nil: healthyAnswer(7)
		rep     breaker.Report
		taken   bool
	}{
		{name: "a success at the learned revision", learned: []breaker.Report{okReport}, rep: okReport, taken: true},
		{name: "a batch of successes", learned: []breaker.Report{okReport}, rep: with(func(r *breaker.Report) { r.Count = 40 }), taken: true},
		{name: "a retry's success", learned: []breaker.Report{okReport}, rep: with(func(r *breaker.Report) { r.Retry = true }), taken: true},
		{name: "a connection not learned yet", rep: okReport},
		{name: "another revision", learned: []breaker.Report{okReport}, rep: with(func(r *breaker.Report) { r.Revision = 8 })},
		{name: "a probe's success", learned: []breaker.Report{okReport}, rep: with(func(r *breaker.Report) { r.LeaseToken = "tok" })},
		{name: "a success with a hint", learned: []breaker.Report{okReport}, rep: with(func(r *breaker.Report) { r.RetryAfter = 1000 })},
		{name: "a failure", learned: []breaker.Report{okReport},
			rep: with(func(r *breaker.Report) { r.Outcome = breaker.OutcomeTransientFailure })},
		{name: "a client error", learned: []breaker.Report{okReport},
			rep: with(func(r *breaker.Report) { r.Outcome = breaker.OutcomeClientError })},
		{name: "after a failure applied at once", rep: okReport, learned: []breaker.Report{okReport,
			with(func(r *breaker.Report) { r.Outcome = breaker.OutcomeTransientFailure })}},
		{name: "the answer showed a throttle", learned: []breaker.Report{okReport}, rep: okReport,
			answer: func() store.ReportResult { r := healthyAnswer(7, at); r.ThrottleProbability = 0.2; return r }},
		{name: "the answer showed it open", learned: []breaker.Report{okReport}, rep: okReport,
			answer: func() store.ReportResult { r := healthyAnswer(7, at); r.Phase = breaker.Open; return r }},
		{name: "the answer did not accept it", learned: []breaker.Report{okReport}, rep: okReport,
			answer: func() store.ReportResult { r := healthyAnswer(7, at); r.Accepted = false; return r }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newCoalescer(&batchLog{}, quietLog(), time.Second, 0)
			for _, r := range tc.learned {
				res := healthyAnswer(7, at)
				if tc.answer != nil {
					res = tc.answer()
				}
				k.learn(c, r, res, at)
			}
			resp, ok, err := k.take(c, tc.rep, at.Add(10*time.Millisecond))
			require.NoError(t, err)
			require.Equal(t, tc.taken, ok)
			conns, _ := k.pending()
			if !tc.taken {
				assert.Nil(t, resp)
				assert.Zero(t, conns, "nothing held")
				return
			}
			assert.Equal(t, 1, conns)
			assert.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED, resp.GetApplied())
			assert.Equal(t, cooldownv1.State_STATE_CLOSED, resp.GetState())
			assert.Equal(t, uint64(7), resp.GetRevision())
			assert.True(t, resp.GetAccepted())
			assert.Equal(t, at.Add(10*time.Millisecond), resp.GetServerTime().AsTime(), "the store's clock then, plus the time since")
		})
	}
}

// TestCoalesceIsTheSumOfTheReports: the reports of many processes on one
// connection within an interval reach the store as one batch per retry
// flag whose counts are their sum (unkeyed summed, keyed each once), with
// the last report's status; a keyed resend to the same replica is
// answered again and counted once, and one that says another count is
// refused. Fails when a report is left out, counted twice, or a retry is
// counted as a first attempt.
func TestCoalesceIsTheSumOfTheReports(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	log := &batchLog{}
	k := newCoalescer(log, quietLog(), time.Second, 0)
	c := store.Conn{Tenant: "t", ID: cid(2)}
	k.learn(c, okReport, healthyAnswer(7, at), at)
	var firsts, retries int64
	var keyed []store.KeyedCount
	for p := range 100 { // 100 processes
		rep := okReport
		rep.Count = int64(p%5 + 1)
		rep.HTTPStatus = 200 + p%3
		rep.Retry = p%10 == 0
		kc := c
		if p%4 == 0 {
			kc.ReportKey = fmt.Sprintf("key-of-process-%03d", p)
		}
		_, ok, err := k.take(kc, rep, at)
		require.NoError(t, err)
		require.True(t, ok)
		switch {
		case kc.ReportKey != "" && !rep.Retry:
			keyed = append(keyed, store.KeyedCount{Key: kc.ReportKey, Count: rep.Count})
		case rep.Retry && kc.ReportKey == "":
			retries += rep.Count
		case rep.Retry:
		default:
			firsts += rep.Count
		}
	}
	// A resend of process 4's report: answered, not held again; with
	// another count: refused.
	again := c
	again.ReportKey = "key-of-process-004"
	rep := okReport
	rep.Count = 5
	resp, ok, err := k.take(again, rep, at)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED, resp.GetApplied())
	rep.Count = 2
	_, ok, err = k.take(again, rep, at)
	require.True(t, ok)
	assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	_, held := k.pending()
	assert.Equal(t, 25, held, "25 keyed reports held once each")

	k.flush(t.Context(), func() time.Time { return at })
	bs := log.of(c.ID)
	require.Len(t, bs, 2, "one batch per retry flag")
	slices.SortFunc(bs, func(a, b store.Coalesced) int {
		if a.Retry == b.Retry {
			return 0
		} else if a.Retry {
			return 1
		}
		return -1
	})
	first, retry := bs[0], bs[1]
	assert.False(t, first.Retry)
	assert.Equal(t, uint64(7), first.Revision)
	assert.Equal(t, firsts, first.Count)
	assert.Equal(t, keyed, first.Keyed)
	assert.Equal(t, 200+99%3, first.HTTPStatus, "the last first attempt's status")
	assert.True(t, retry.Retry)
	var rc int64
	for _, kc := range retry.Keyed {
		rc += kc.Count
	}
	assert.Equal(t, retries, retry.Count)
	assert.Equal(t, int64(1+1+1+1+1), rc, "processes 0, 20, 40, 60, 80: keyed retries of count 1")
	conns, held := k.pending()
	assert.Zero(t, conns)
	assert.Zero(t, held)
	// The flush's answer keeps the connection learned: the next interval's
	// successes are held from the first.
	_, ok, err = k.take(c, okReport, at)
	require.NoError(t, err)
	assert.True(t, ok)
}

// TestCoalesceFlushesEveryInterval: under synctest's clock, reports held
// reach the store one interval after the loop's last flush at the latest
// and not before it; a connection with nothing held at CoalesceQuietKeep+1
// flushes in a row is forgotten (its next success goes at once), not
// before. Fails if the loop does not flush, flushes late, forgets a
// connection at its first quiet interval, or keeps idle ones.
func TestCoalesceFlushesEveryInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log := &batchLog{}
		k := newCoalescer(log, quietLog(), 200*time.Millisecond, time.Second)
		k.start(time.Now)
		defer k.close(context.Background(), time.Now)
		c := store.Conn{Tenant: "t", ID: cid(3)}
		k.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
		time.Sleep(50 * time.Millisecond)
		for range 3 {
			_, ok, err := k.take(c, okReport, time.Now())
			require.NoError(t, err)
			require.True(t, ok)
		}
		time.Sleep(149 * time.Millisecond)
		synctest.Wait()
		assert.Empty(t, log.of(c.ID), "not before the interval")
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		require.Len(t, log.of(c.ID), 1, "at the interval")
		assert.Equal(t, int64(3), log.of(c.ID)[0].Count)
		// Held again during the next interval, then nothing: still
		// learned for CoalesceQuietKeep quiet intervals, then forgotten.
		_, ok, _ := k.take(c, okReport, time.Now())
		require.True(t, ok)
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		require.Len(t, log.of(c.ID), 2)
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		assert.True(t, k.holdable(c, okReport), "a quiet interval keeps it learned")
		time.Sleep(CoalesceQuietKeep * 200 * time.Millisecond)
		synctest.Wait()
		_, ok, _ = k.take(c, okReport, time.Now())
		assert.False(t, ok, "CoalesceQuietKeep+1 quiet intervals in a row forget the connection")
	})
}

// TestCoalesceFlushesOnClose: close applies every report held, at once,
// whatever the interval, and every report after it goes to the store at
// once: nothing acknowledged is lost on a clean stop. Fails if close
// drops what it holds or keeps taking reports.
func TestCoalesceFlushesOnClose(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log := &batchLog{}
		k := newCoalescer(log, quietLog(), time.Hour, time.Second)
		k.start(time.Now)
		at := time.Now()
		var ids []keys.ID
		for i := range 40 {
			c := store.Conn{Tenant: "t", ID: cid(byte(0x40 + i))}
			ids = append(ids, c.ID)
			k.learn(c, okReport, healthyAnswer(7, at), at)
			for range i + 1 {
				_, ok, err := k.take(c, okReport, at)
				require.NoError(t, err)
				require.True(t, ok)
			}
		}
		k.close(context.Background(), time.Now)
		assert.Equal(t, at, time.Now(), "no wait for the interval")
		for i, id := range ids {
			bs := log.of(id)
			require.Len(t, bs, 1)
			assert.Equal(t, int64(i+1), bs[0].Count)
		}
		c := store.Conn{Tenant: "t", ID: ids[0]}
		k.learn(c, okReport, healthyAnswer(7, at), at)
		_, ok, _ := k.take(c, okReport, at)
		assert.False(t, ok, "after close every report goes at once")
	})
}

// counts are the counts of batches, in the order they were applied.
func counts(bs []store.Coalesced) []int64 {
	var out []int64
	for _, b := range bs {
		out = append(out, b.Count)
	}
	return out
}

// TestCoalesceSettleWaitsForTheFlush: a report applied at once (settle)
// while a flush is applying the connection's earlier successes waits for
// that flush, then applies the successes held since, before it returns:
// the store sees them in the order they came. Fails if settle returns
// before the flush's batch is applied, or leaves the later successes held.
func TestCoalesceSettleWaitsForTheFlush(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log := &batchLog{gate: make(chan struct{})}
		k := newCoalescer(log, quietLog(), time.Hour, time.Second)
		c := store.Conn{Tenant: "t", ID: cid(5)}
		k.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
		take := func(n int) {
			for range n {
				_, ok, err := k.take(c, okReport, time.Now())
				require.NoError(t, err)
				require.True(t, ok)
			}
		}
		take(3)
		go k.flush(context.Background(), time.Now)
		synctest.Wait() // the flush is applying the 3
		take(2)
		settled := make(chan struct{})
		go func() {
			k.settle(t.Context(), c, time.Now)
			close(settled)
		}()
		synctest.Wait()
		select {
		case <-settled:
			t.Fatal("settle returned while the flush was applying the earlier successes")
		default:
		}
		log.mu.Lock()
		assert.Equal(t, []int64{3}, log.started, "the later successes wait for the flush's batch")
		log.mu.Unlock()
		close(log.gate)
		synctest.Wait()
		<-settled
		assert.Equal(t, []int64{3, 2}, counts(log.of(c.ID)), "the flush's batch, then the successes held since")
		conns, _ := k.pending()
		assert.Zero(t, conns)
	})
}

// TestCoalesceCloseWaitsForASettle: successes taken while a settle is
// applying the connection's earlier ones are left by a flush (they must
// follow the settle's), and close waits for the settle and then applies
// them: nothing acknowledged is lost on a clean stop. Fails if close
// returns with them held.
func TestCoalesceCloseWaitsForASettle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log := &batchLog{gate: make(chan struct{})}
		k := newCoalescer(log, quietLog(), time.Hour, time.Second)
		c := store.Conn{Tenant: "t", ID: cid(6)}
		k.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
		_, ok, _ := k.take(c, okReport, time.Now())
		require.True(t, ok)
		go k.settle(t.Context(), c, time.Now)
		synctest.Wait() // the settle is applying the first
		for range 4 {
			_, ok, _ = k.take(c, okReport, time.Now())
			require.True(t, ok)
		}
		closed := make(chan struct{})
		go func() {
			k.close(context.Background(), time.Now)
			close(closed)
		}()
		synctest.Wait()
		assert.Empty(t, log.of(c.ID), "the flush did not pass the settle")
		close(log.gate)
		<-closed
		assert.Equal(t, []int64{1, 4}, counts(log.of(c.ID)))
	})
}

// TestCoalesceFailedFlushStopsTaking: a batch the store did not apply is
// logged and lost (a second try could count it twice), and the
// connection's successes go at once until an answer shows it healthy.
func TestCoalesceFailedFlushStopsTaking(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	log := &batchLog{fail: store.ErrUnavailable}
	k := newCoalescer(log, quietLog(), time.Second, 0)
	c := store.Conn{Tenant: "t", ID: cid(4)}
	k.learn(c, okReport, healthyAnswer(7, at), at)
	_, ok, _ := k.take(c, okReport, at)
	require.True(t, ok)
	k.flush(t.Context(), func() time.Time { return at })
	_, ok, _ = k.take(c, okReport, at)
	assert.False(t, ok)
}

// TestCoalesceBounds: a replica holds at most maxConns connections and
// maxKeyed keyed reports; past them a report goes to the store at once
// (counted, not held), and a flush frees the room. Fails when a bound is
// not enforced.
func TestCoalesceBounds(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	k := newCoalescer(&batchLog{}, quietLog(), time.Second, 0)
	k.maxConns, k.maxKeyed = 8, 5
	for i := range 12 {
		k.learn(store.Conn{Tenant: "t", ID: cid(byte(0x80 + i))}, okReport, healthyAnswer(7, at), at)
	}
	taken := 0
	for i := range 12 {
		if _, ok, _ := k.take(store.Conn{Tenant: "t", ID: cid(byte(0x80 + i))}, okReport, at); ok {
			taken++
		}
	}
	assert.Equal(t, 8, taken, "connections past maxConns are not learned")
	c := store.Conn{Tenant: "t", ID: cid(0x80)}
	keyedTaken := 0
	for i := range 9 {
		kc := c
		kc.ReportKey = fmt.Sprintf("bounded-key-%05d", i)
		if _, ok, _ := k.take(kc, okReport, at); ok {
			keyedTaken++
		}
	}
	assert.Equal(t, 5, keyedTaken, "keyed reports past maxKeyed go at once")
	k.flush(t.Context(), func() time.Time { return at })
	kc := c
	kc.ReportKey = "bounded-key-after-flush"
	_, ok, _ := k.take(kc, okReport, at)
	assert.True(t, ok, "a flush frees the room")
}

// TestCoalesceMemoryBound measures what the coalescer holds per
// connection and per keyed report and holds it to coalesceEntryBytes and
// coalesceKeyBytes, the figures decision 0054's bound is computed from.
func TestCoalesceMemoryBound(t *testing.T) {
	// Not parallel: it reads the heap.
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	const conns, perConn = 4096, 4
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	k := newCoalescer(&batchLog{}, quietLog(), time.Second, 0)
	before := heap()
	for i := range conns {
		var id keys.ID
		id[0], id[1] = byte(i), byte(i>>8)
		c := store.Conn{Tenant: "tenant-a", ID: id}
		k.learn(c, okReport, healthyAnswer(7, at), at)
		_, ok, _ := k.take(c, okReport, at)
		require.True(t, ok)
	}
	entries := heap()
	for i := range conns {
		var id keys.ID
		id[0], id[1] = byte(i), byte(i>>8)
		for j := range perConn {
			c := store.Conn{Tenant: "tenant-a", ID: id, ReportKey: fmt.Sprintf("%022d", i*perConn+j)}
			_, ok, _ := k.take(c, okReport, at)
			require.True(t, ok)
		}
	}
	keyed := heap()
	perEntry := float64(entries-before) / conns
	perKey := float64(keyed-entries) / (conns * perConn)
	t.Logf("coalescer heap: %.0f B per connection, %.0f B per keyed report", perEntry, perKey)
	assert.Less(t, perEntry, float64(coalesceEntryBytes))
	assert.Less(t, perKey, float64(coalesceKeyBytes))
	runtime.KeepAlive(k)
}

// TestCoalesceRace: processes taking reports, answers being learned and
// flushes running at once, under -race, count every report once.
func TestCoalesceRace(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	log := &batchLog{}
	k := newCoalescer(log, quietLog(), time.Second, 0)
	c := store.Conn{Tenant: "t", ID: cid(5)}
	k.learn(c, okReport, healthyAnswer(7, at), at)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var held int64
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if _, ok, _ := k.take(c, okReport, at); ok {
					mu.Lock()
					held++
					mu.Unlock()
				}
				k.learn(c, okReport, healthyAnswer(7, at), at)
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			k.flush(t.Context(), func() time.Time { return at })
		}
	})
	wg.Wait()
	k.flush(t.Context(), func() time.Time { return at })
	var sum int64
	for _, b := range log.of(c.ID) {
		sum += b.Count
	}
	assert.Equal(t, held, sum, "every report held is applied once")
	assert.Positive(t, held)
}
