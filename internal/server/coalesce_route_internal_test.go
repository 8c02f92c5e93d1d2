package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// peerNet is a coalesceRoute over coalescers in one process: owners maps a
// connection to its owner's name (default "b"), and Merge and Settle call
// that coalescer directly, as PeerService would.
type peerNet struct {
	mu      sync.Mutex
	self    string
	peers   map[string]*coalescer
	owners  map[keys.ID]string
	down    map[string]bool
	silent  bool // Merge takes the batches, then its answer is lost
	merges  int
	settles int
	gate    chan struct{} // non-nil: Merge waits for it
}

func (n *peerNet) owner(key connKey) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	o, ok := n.owners[key.id]
	if !ok {
		o = "b"
	}
	return o, o != n.self
}

func (n *peerNet) merge(_ context.Context, addr string, bs []*cooldownv1.PeerBatch) (*cooldownv1.MergeResponse, error) {
	n.mu.Lock()
	n.merges++
	down, k, gate := n.down[addr], n.peers[addr], n.gate
	n.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if down {
		return nil, connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
	}
	if n.silent {
		k.merge(context.Background(), mustParse(bs), time.Now()) //nolint:errcheck // taken, then the answer is lost
		return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("no answer"))
	}
	in := make([]peerBatch, len(bs))
	for i, b := range bs {
		pb, err := parsePeerBatch(b)
		if err != nil {
			return nil, err
		}
		in[i] = pb
	}
	return k.merge(context.Background(), in, time.Now())
}

func mustParse(bs []*cooldownv1.PeerBatch) []peerBatch {
	out := make([]peerBatch, len(bs))
	for i, b := range bs {
		pb, err := parsePeerBatch(b)
		if err != nil {
			panic(err)
		}
		out[i] = pb
	}
	return out
}

func (n *peerNet) settle(ctx context.Context, addr string, key connKey, label string) error {
	n.mu.Lock()
	n.settles++
	down, k := n.down[addr], n.peers[addr]
	n.mu.Unlock()
	if down {
		return errors.New("connection refused")
	}
	k.settleHeld(ctx, store.Conn{Tenant: key.tenant, ID: key.id, Label: label}, time.Now)
	return nil
}

// routedPair is replicas a and b, each on its own batchLog, a routing to b.
func routedPair(t *testing.T) (a, b *coalescer, la, lb *batchLog, net *peerNet) {
	t.Helper()
	la, lb = &batchLog{}, &batchLog{}
	a = newCoalescer(la, quietLog(), time.Hour, time.Second)
	b = newCoalescer(lb, quietLog(), time.Hour, time.Second)
	net = &peerNet{self: "a", peers: map[string]*coalescer{"a": a, "b": b}, owners: map[keys.ID]string{}, down: map[string]bool{}}
	a.route = net
	return a, b, la, lb, net
}

func takeN(t *testing.T, k *coalescer, c store.Conn, rep breaker.Report, n int) {
	t.Helper()
	for i := range n {
		cc := c
		if c.ReportKey != "" {
			cc.ReportKey = fmt.Sprintf("%s%04d", c.ReportKey, i)
		}
		_, ok, err := k.take(cc, rep, time.Now())
		require.NoError(t, err)
		require.True(t, ok, "taken")
	}
}

// TestRoutedBatchesMeetAtTheOwner: a's successes of a connection b owns
// go to b at a's flush, not to Redis, and reach Redis once, in b's batch,
// summed with b's own and the keyed ones listed; a connection a owns stays
// at a. Fails if a routed batch reaches a's store, if b applies them as
// two batches, or if a count is lost.
func TestRoutedBatchesMeetAtTheOwner(t *testing.T) {
	t.Parallel()
	a, b, la, lb, net := routedPair(t)
	now := time.Now()
	hot := store.Conn{Tenant: "t", ID: cid(1)}
	mine := store.Conn{Tenant: "t", ID: cid(2)}
	net.owners[mine.ID] = "a"
	for _, k := range []*coalescer{a, b} {
		k.learn(hot, okReport, healthyAnswer(7, now), now)
	}
	a.learn(mine, okReport, healthyAnswer(7, now), now)
	takeN(t, a, hot, okReport, 3)
	takeN(t, a, store.Conn{Tenant: "t", ID: hot.ID, ReportKey: "keyedreportfroma"}, okReport, 2)
	takeN(t, b, hot, okReport, 4)
	takeN(t, a, mine, okReport, 5)

	a.flush(context.Background(), time.Now)
	assert.Empty(t, la.of(hot.ID), "routed, not applied by a")
	assert.Empty(t, lb.of(hot.ID), "held by b until its flush")
	require.Len(t, la.of(mine.ID), 1, "a's own connection is applied by a")
	assert.Equal(t, int64(5), la.of(mine.ID)[0].Count)

	b.flush(context.Background(), time.Now)
	got := lb.of(hot.ID)
	require.Len(t, got, 1, "one batch for both replicas")
	assert.Equal(t, int64(7), got[0].Count)
	assert.Len(t, got[0].Keyed, 2)
	assert.Equal(t, uint64(7), got[0].Revision)
	assert.Equal(t, 1, net.merges, "one Merge per peer per flush")
}

// TestRoutedBatchRefusedOrLostIsAppliedHere: a batch the owner refuses
// (it holds the connection's successes at another revision) or cannot be
// reached for is applied by the sender at its flush, as without routing:
// nothing acknowledged is lost. Fails if either is dropped.
func TestRoutedBatchRefusedOrLostIsAppliedHere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		prep func(b *coalescer, net *peerNet, c store.Conn)
	}{
		{"another revision at the owner", func(b *coalescer, _ *peerNet, c store.Conn) {
			b.learn(c, okReport, healthyAnswer(8, time.Now()), time.Now())
			takeN(t, b, c, breaker.Report{Revision: 8, Outcome: breaker.OutcomeSuccess}, 1)
		}},
		{"the owner is down", func(_ *coalescer, net *peerNet, _ store.Conn) { net.down["b"] = true }},
		{"the owner is closing", func(b *coalescer, _ *peerNet, _ store.Conn) { b.close(context.Background(), time.Now) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b, la, _, net := routedPair(t)
			c := store.Conn{Tenant: "t", ID: cid(3)}
			a.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
			takeN(t, a, c, okReport, 3)
			tc.prep(b, net, c)
			a.flush(context.Background(), time.Now)
			got := la.of(c.ID)
			require.Len(t, got, 1, "applied by the sender")
			assert.Equal(t, int64(3), got[0].Count)
		})
	}
}

// TestRoutedSettleGoesFirst: before a report of a connection is applied at
// once (a failure), the batches its sender routed to the owner are applied
// (Settle), then the sender's own pending ones: Redis sees the successes
// before the failure, as in one replica. Fails if the owner still holds
// them when settle returns.
func TestRoutedSettleGoesFirst(t *testing.T) {
	t.Parallel()
	a, _, la, lb, net := routedPair(t)
	c := store.Conn{Tenant: "t", ID: cid(4)}
	a.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
	takeN(t, a, c, okReport, 2)
	a.flush(context.Background(), time.Now)
	takeN(t, a, c, okReport, 1)
	require.Empty(t, lb.of(c.ID))
	a.settle(context.Background(), c, time.Now)
	require.Len(t, lb.of(c.ID), 1, "the owner applied what a routed")
	assert.Equal(t, int64(2), lb.of(c.ID)[0].Count)
	require.Len(t, la.of(c.ID), 1, "then a's own pending")
	assert.Equal(t, int64(1), la.of(c.ID)[0].Count)
	assert.Equal(t, 1, net.settles)
	// Nothing routed since: the next report at once asks no one.
	a.settle(context.Background(), c, time.Now)
	assert.Equal(t, 1, net.settles)
}

// TestRoutedLearnsTheOwnersAnswers: what the owner learned of a
// connection from Redis (here a trip: revision 8, open) reaches the sender
// in the Merge's answer, so the sender stops coalescing its successes.
// Fails if the sender keeps answering COALESCED at revision 7.
func TestRoutedLearnsTheOwnersAnswers(t *testing.T) {
	t.Parallel()
	a, b, _, _, _ := routedPair(t)
	c := store.Conn{Tenant: "t", ID: cid(5)}
	a.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
	b.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
	open := healthyAnswer(8, time.Now())
	open.Phase = breaker.Open
	b.learn(c, breaker.Report{Revision: 8, Outcome: breaker.OutcomeTransientFailure}, open, time.Now())
	takeN(t, a, c, okReport, 1)
	a.flush(context.Background(), time.Now)
	_, ok, _ := a.take(c, okReport, time.Now())
	assert.False(t, ok, "the sender learned the trip from the owner")
}

// TestRoutedBatchesAreNotRoutedOn: a batch a peer routed here is applied
// here even when this replica's view names another owner (views differ for
// a renewal): a batch is routed once, never in a loop.
func TestRoutedBatchesAreNotRoutedOn(t *testing.T) {
	t.Parallel()
	a, b, la, lb, _ := routedPair(t)
	c := store.Conn{Tenant: "t", ID: cid(6)}
	b.route = &peerNet{self: "b", peers: map[string]*coalescer{"a": a, "b": b}, owners: map[keys.ID]string{c.ID: "a"}}
	a.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
	takeN(t, a, c, okReport, 2)
	a.flush(context.Background(), time.Now)
	b.flush(context.Background(), time.Now)
	require.Len(t, lb.of(c.ID), 1)
	assert.Equal(t, int64(2), lb.of(c.ID)[0].Count)
	assert.Empty(t, la.of(c.ID))
}

// TestRendezvousOwner: every replica with one view picks the same owner;
// a replica leaving moves only the connections it owned, and one joining
// takes about its share. Fails on a hash that depends on the process or
// moves connections between replicas that stayed.
func TestRendezvousOwner(t *testing.T) {
	t.Parallel()
	view := func(r *router, ps ...string) { r.live.Store(&ps) }
	peers := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080", "10.0.0.4:8080"}
	rs := make([]*router, len(peers))
	for i, p := range peers {
		rs[i] = &router{self: p}
		view(rs[i], peers...)
	}
	const n = 4000
	owners := map[connKey]string{}
	count := map[string]int{}
	for i := range n {
		var id keys.ID
		id[0], id[1], id[2] = byte(i), byte(i>>8), 0x5a
		key := connKey{"t", id}
		o, _ := rs[0].owner(key)
		for _, r := range rs[1:] {
			oo, remote := r.owner(key)
			require.Equal(t, o, oo)
			assert.Equal(t, o != r.self, remote)
		}
		owners[key] = o
		count[o]++
	}
	for _, p := range peers {
		assert.InDelta(t, n/len(peers), count[p], float64(n/len(peers)/5), "share of %s", p)
	}
	view(rs[0], peers[:3]...)
	moved := 0
	for key, o := range owners {
		now, _ := rs[0].owner(key)
		if o != peers[3] {
			assert.Equal(t, o, now, "kept by a replica that stayed")
		} else {
			moved++
		}
	}
	assert.Positive(t, moved)
	view(rs[0], peers[0])
	o, remote := rs[0].owner(connKey{"t", cid(1)})
	assert.Equal(t, peers[0], o)
	assert.False(t, remote, "alone: every connection is its own")
}

// TestRoutedUnansweredMergeIsNotAppliedTwice: a Merge the owner took but
// whose answer was lost (a timeout) is not applied by the sender too: the
// successes are counted once, by the owner, never twice (decision 0054:
// lost rather than counted twice). Fails if the sender falls back on any
// error.
func TestRoutedUnansweredMergeIsNotAppliedTwice(t *testing.T) {
	t.Parallel()
	a, b, la, lb, net := routedPair(t)
	net.silent = true
	c := store.Conn{Tenant: "t", ID: cid(7)}
	a.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
	takeN(t, a, c, okReport, 6)
	a.flush(context.Background(), time.Now)
	b.flush(context.Background(), time.Now)
	assert.Empty(t, la.of(c.ID), "not applied by the sender")
	require.Len(t, lb.of(c.ID), 1)
	assert.Equal(t, int64(6), lb.of(c.ID)[0].Count, "counted once")
	_, ok, _ := a.take(c, okReport, time.Now())
	assert.False(t, ok, "after a lost batch the sender learns again")
}

// TestRoutedBatchAtAnOlderRevision: an owner that learned a newer
// revision refuses a batch at the older one (the sender applies it), and
// an owner holding a peer's batch at an older revision does not add its
// own newer successes to it: they go at once. Fails if successes of two
// revisions are applied as one batch.
func TestRoutedBatchAtAnOlderRevision(t *testing.T) {
	t.Parallel()
	a, b, la, lb, _ := routedPair(t)
	c := store.Conn{Tenant: "t", ID: cid(8)}
	rev8 := breaker.Report{Revision: 8, Outcome: breaker.OutcomeSuccess}
	a.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
	takeN(t, a, c, okReport, 2)
	a.flush(context.Background(), time.Now) // b holds 2 at revision 7, unlearned
	b.learn(c, rev8, healthyAnswer(8, time.Now()), time.Now())
	_, ok, _ := b.take(c, rev8, time.Now())
	assert.False(t, ok, "not added to the batch at revision 7")
	b.flush(context.Background(), time.Now)
	require.Len(t, lb.of(c.ID), 1)
	assert.Equal(t, uint64(7), lb.of(c.ID)[0].Revision)

	takeN(t, b, c, rev8, 1)
	takeN(t, a, c, okReport, 3)
	a.flush(context.Background(), time.Now)
	require.Len(t, la.of(c.ID), 1, "refused at revision 8: applied by the sender")
	assert.Equal(t, int64(3), la.of(c.ID)[0].Count)
}

// TestRoutedSettleWaitsForAForwardInFlight: a report applied at once while
// the connection's first Merge is still on its way waits for it and then
// asks the owner to settle: the routed successes reach Redis first. Fails
// if settle reads the owner before the Merge is answered.
func TestRoutedSettleWaitsForAForwardInFlight(t *testing.T) {
	t.Parallel()
	a, _, _, lb, net := routedPair(t)
	c := store.Conn{Tenant: "t", ID: cid(9)}
	a.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
	takeN(t, a, c, okReport, 4)
	net.gate = make(chan struct{})
	flushed := make(chan struct{})
	go func() { a.flush(context.Background(), time.Now); close(flushed) }()
	require.Eventually(t, func() bool { net.mu.Lock(); defer net.mu.Unlock(); return net.merges == 1 }, 5*time.Second, time.Millisecond)
	settled := make(chan struct{})
	go func() { a.settle(context.Background(), c, time.Now); close(settled) }()
	close(net.gate)
	<-flushed
	<-settled
	require.Len(t, lb.of(c.ID), 1, "the owner applied the routed batch before settle returned")
	assert.Equal(t, int64(4), lb.of(c.ID)[0].Count)
}

// TestRoutedSettleAfterAQuietInterval: intervals with no success after
// routing, even past CoalesceQuietKeep, do not forget the owner: a
// failure then still asks it to settle. Fails if the flush deletes the
// entry that remembers the route.
func TestRoutedSettleAfterAQuietInterval(t *testing.T) {
	t.Parallel()
	a, _, _, lb, net := routedPair(t)
	c := store.Conn{Tenant: "t", ID: cid(10)}
	a.learn(c, okReport, healthyAnswer(7, time.Now()), time.Now())
	a.interval = time.Minute
	takeN(t, a, c, okReport, 5)
	a.flush(context.Background(), time.Now)
	for range CoalesceQuietKeep + 1 { // quiet: learned for CoalesceQuietKeep, then forgotten
		a.flush(context.Background(), time.Now)
	}
	a.settle(context.Background(), c, time.Now)
	assert.Equal(t, 1, net.settles)
	require.Len(t, lb.of(c.ID), 1)
	_, ok, _ := a.take(c, okReport, time.Now())
	assert.False(t, ok, "quiet intervals in a row still forget what was learned")
}
