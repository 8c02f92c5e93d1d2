package store_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// recv waits for one transition or the end of ch; ok is false when ch closed.
func recv(t *testing.T, ctx context.Context, ch <-chan store.Transition) (store.Transition, bool) {
	t.Helper()
	select {
	case tr, ok := <-ch:
		return tr, ok
	case <-ctx.Done():
		t.Fatal("nothing on the watch channel before the test's deadline")
		return store.Transition{}, false
	}
}

// TestWatchEndsWhenTheSubscriptionIsReestablished: go-redis re-subscribes
// by itself after its pub/sub connection drops, and whatever was published
// in between is gone. A watcher must learn that (its channel closes, so it
// re-reads the state) instead of silently missing events.
func TestWatchEndsWhenTheSubscriptionIsReestablished(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	evs, err := st.Watch(ctx, "a")
	require.NoError(t, err)
	c := store.Conn{Tenant: "a", ID: testID(1)}
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeAuthFailure})
	require.NoError(t, err)
	_, ok := recv(t, ctx, evs)
	require.True(t, ok, "the first event arrives")

	// What a failover, an output-buffer limit or an operator does.
	require.NoError(t, rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	// An event in the gap (it may or may not be seen, depending on timing).
	_, err = st.Force(ctx, "a", testID(2), breaker.ForcedOpen, 0, "ops", "in the gap")
	require.NoError(t, err)
	for {
		if _, ok := recv(t, ctx, evs); !ok {
			break // closed: the watcher knows it may have missed events
		}
	}

	// The next watcher gets a fresh subscription that works.
	evs2, err := st.Watch(ctx, "a")
	require.NoError(t, err)
	_, err = st.Force(ctx, "a", testID(3), breaker.ForcedOpen, 0, "ops", "after")
	require.NoError(t, err)
	tr, ok := recv(t, ctx, evs2)
	require.True(t, ok)
	assert.Equal(t, testID(3), tr.ID)
}

// gatedDialer lets a test hold new Redis connections at the dial.
type gatedDialer struct {
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	blocked chan struct{} // receives once per held dial
}

func (g *gatedDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		select { // tell the test; never block on it
		case g.blocked <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (g *gatedDialer) close() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedDialer) open() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

// gatedStore is a store on a miniredis whose new connections wait at g's
// gate; the command pool already has its connection (blocked: how many
// dials may wait to be counted).
func gatedStore(t *testing.T, blocked int) (*miniredis.Miniredis, *gatedDialer, *store.Store) {
	t.Helper()
	m, _ := redistest.Mini(t)
	g := &gatedDialer{blocked: make(chan struct{}, blocked)}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), Dialer: g.dial})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	require.NoError(t, rdb.Ping(t.Context()).Err())
	return m, g, st
}

// TestSlowSubscribeDoesNotStallOtherTenants: while one tenant's first
// watcher waits for Redis to confirm its subscription, other tenants'
// events are still delivered (the hub's lock is not held across it).
func TestSlowSubscribeDoesNotStallOtherTenants(t *testing.T) {
	t.Parallel()
	_, g, st := gatedStore(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	evsA, err := st.Watch(ctx, "a")
	require.NoError(t, err)

	g.close()
	done := make(chan error, 1)
	go func() {
		_, err := st.Watch(ctx, "b") // held at the dial of its subscription
		done <- err
	}()
	<-g.blocked
	_, err = st.Force(ctx, "a", testID(1), breaker.ForcedOpen, 0, "ops", "")
	require.NoError(t, err)
	tr, ok := recv(t, ctx, evsA)
	require.True(t, ok)
	assert.Equal(t, testID(1), tr.ID, "tenant a's event arrives while b subscribes")

	g.open()
	require.NoError(t, <-done)
}

// TestWatchersJoiningAnOpeningFeedShareIt: watchers that arrive while a
// tenant's subscription is being confirmed wait for it and share it.
func TestWatchersJoiningAnOpeningFeedShareIt(t *testing.T) {
	t.Parallel()
	m, g, st := gatedStore(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g.close()
	const n = 5
	chans := make(chan (<-chan store.Transition), n)
	for range n {
		go func() {
			ch, err := st.Watch(ctx, "a")
			assert.NoError(t, err)
			chans <- ch
		}()
	}
	<-g.blocked // the first watcher dials; the others wait for its feed
	g.open()
	var all []<-chan store.Transition
	for range n {
		all = append(all, <-chans)
	}
	_, err := st.Force(ctx, "a", testID(1), breaker.ForcedOpen, 0, "ops", "")
	require.NoError(t, err)
	for _, ch := range all {
		tr, ok := recv(t, ctx, ch)
		require.True(t, ok)
		assert.Equal(t, testID(1), tr.ID)
	}
	assert.Equal(t, 1, m.PubSubNumSub("cd:ev:a")["cd:ev:a"], "one subscription for all of them")
}

// TestWatcherOutlivesAnOpenerThatLeft: when the first watcher of a tenant
// leaves while its subscription is being confirmed, a watcher waiting for
// that feed opens a new one instead of failing.
func TestWatcherOutlivesAnOpenerThatLeft(t *testing.T) {
	t.Parallel()
	_, g, st := gatedStore(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g.close()
	openerCtx, leave := context.WithCancel(ctx)
	openerDone := make(chan error, 1)
	go func() {
		_, err := st.Watch(openerCtx, "a")
		openerDone <- err
	}()
	<-g.blocked // the opener dials
	waiter := make(chan (<-chan store.Transition), 1)
	go func() {
		ch, err := st.Watch(ctx, "a")
		assert.NoError(t, err)
		waiter <- ch
	}()
	time.Sleep(50 * time.Millisecond) // let the waiter find the opening feed (either order is correct)
	leave()
	require.Error(t, <-openerDone)
	<-g.blocked // the waiter dials a feed of its own
	g.open()
	ch := <-waiter
	_, err := st.Force(ctx, "a", testID(1), breaker.ForcedOpen, 0, "ops", "")
	require.NoError(t, err)
	tr, ok := recv(t, ctx, ch)
	require.True(t, ok)
	assert.Equal(t, testID(1), tr.ID)
}
