package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/keys"
)

const (
	// watchBuffer is how many transitions a watcher may lag behind before
	// it is dropped (its channel closes; it re-reads state and watches
	// again).
	watchBuffer = 256
	// subscribeTimeout bounds the wait for Redis to confirm a tenant's
	// subscription.
	subscribeTimeout = 2 * time.Second
	// joinAttempts bounds how often a watcher retries a feed that failed
	// under it while it joined.
	joinAttempts = 3
)

// feed is one tenant's shared subscription, fanned out to its watchers,
// so that N watchers of a tenant cost one Redis connection per replica.
type feed struct {
	ready chan struct{} // closed once the subscription is confirmed or failed
	err   error         // why it failed; written before ready closes
	sub   *redis.PubSub
	subs  map[chan Transition]struct{}
	stop  context.CancelFunc
}

// hub holds the live feeds of a Store. Its mutex guards the map and each
// feed's watchers; it is never held across a Redis round trip, so one
// tenant's slow subscribe does not stall another tenant's events.
type hub struct {
	mu    sync.Mutex
	feeds map[string]*feed
}

// Watch streams a tenant's transitions until ctx ends. The channel closes
// when ctx ends, when the watcher falls more than a buffer behind, or when
// the subscription breaks — including when the Redis connection dropped
// and was re-established, since events published in between are lost.
// Callers then re-read state and watch again. Every transition published
// after Watch returns and before the channel closes is delivered.
func (s *Store) Watch(ctx context.Context, tenant string) (<-chan Transition, error) {
	ch := make(chan Transition, watchBuffer)
	if err := s.hub.join(s, ctx, tenant, ch); err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		s.hub.leave(tenant, ch)
	}()
	return ch, nil
}

// join adds ch to the tenant's feed, opening it when there is none.
func (h *hub) join(s *Store, ctx context.Context, tenant string, ch chan Transition) error {
	err := errors.New("subscription failed while joining")
	for range joinAttempts {
		h.mu.Lock()
		if h.feeds == nil {
			h.feeds = map[string]*feed{}
		}
		f, ok := h.feeds[tenant]
		if !ok {
			f = &feed{ready: make(chan struct{}), subs: map[chan Transition]struct{}{}}
			h.feeds[tenant] = f
		}
		h.mu.Unlock()
		if !ok {
			// The first watcher of a tenant on this replica opens its
			// subscription; it joins as part of opening.
			return h.open(s, ctx, tenant, f, ch)
		}
		select {
		case <-f.ready:
		case <-ctx.Done():
			return unavailable("watch", ctx.Err())
		}
		h.mu.Lock()
		if f.err == nil && h.feeds[tenant] == f {
			f.subs[ch] = struct{}{}
			h.mu.Unlock()
			return nil
		}
		h.mu.Unlock()
		if f.err != nil && !errors.Is(f.err, context.Canceled) {
			return f.err // Redis refused or did not confirm in time
		}
		// The feed failed because its opener left, or ended between its
		// confirmation and this join: retry.
		if f.err != nil {
			err = f.err
		}
	}
	return err
}

// open subscribes f to the tenant's channel and waits until Redis confirms
// it, so no event after Watch returns is missed; then it starts the pump.
func (h *hub) open(s *Store, ctx context.Context, tenant string, f *feed, ch chan Transition) error {
	sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	defer cancel()
	sub := s.rdb.Subscribe(sctx, keys.Channel(tenant))
	msg, err := sub.Receive(sctx)
	if err == nil {
		if m, ok := msg.(*redis.Subscription); !ok || m.Kind != "subscribe" {
			err = fmt.Errorf("unexpected first pub/sub message %T", msg)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	defer close(f.ready)
	if err != nil {
		_ = sub.Close()
		f.err = unavailable("watch", err)
		if h.feeds[tenant] == f {
			delete(h.feeds, tenant)
		}
		return f.err
	}
	fctx, stop := context.WithCancel(context.Background())
	f.sub, f.stop = sub, stop
	f.subs[ch] = struct{}{}
	go h.pump(fctx, tenant, f)
	return nil
}

// leave removes a watcher and closes the feed after the last one.
func (h *hub) leave(tenant string, ch chan Transition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, ok := h.feeds[tenant]
	if !ok {
		return
	}
	if _, ok := f.subs[ch]; ok {
		delete(f.subs, ch)
		close(ch)
	}
	if len(f.subs) == 0 && f.stop != nil {
		delete(h.feeds, tenant)
		f.stop()
	}
}

// pump fans a tenant's events out until the feed stops or breaks.
func (h *hub) pump(ctx context.Context, tenant string, f *feed) {
	defer func() { _ = f.sub.Close() }()
	// With subscriptions in the stream, a re-subscription is visible: the
	// initial confirmation was read in open, so any later one means
	// go-redis lost the connection (CLIENT KILL, an output-buffer limit, a
	// failover) and subscribed again on its own.
	msgs := f.sub.ChannelWithSubscriptions(redis.WithChannelSize(watchBuffer))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				h.fail(tenant, f, "subscription closed")
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					h.fail(tenant, f, "the Redis connection dropped and was re-subscribed; events in between are lost")
					return
				}
			case *redis.Message:
				t, err := decodeEvent(tenant, m.Payload)
				if err != nil {
					slog.Warn("dropping malformed event", "tenant", tenant, "err", err)
					continue
				}
				h.deliver(tenant, f, t)
			}
		}
	}
}

func (h *hub) deliver(tenant string, f *feed, t Transition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range f.subs {
		select {
		case ch <- t:
		default: // too far behind: drop it; it re-reads and watches again
			delete(f.subs, ch)
			close(ch)
		}
	}
	if len(f.subs) == 0 && h.feeds[tenant] == f {
		delete(h.feeds, tenant)
		f.stop()
	}
}

// fail ends every watcher of a feed whose subscription broke, so each
// re-reads the state; the next watcher opens a new feed.
func (h *hub) fail(tenant string, f *feed, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(f.subs) > 0 {
		slog.Warn("watch streams ended", "tenant", tenant, "watchers", len(f.subs), "why", why)
	}
	for ch := range f.subs {
		close(ch)
	}
	f.subs = nil
	if h.feeds[tenant] == f {
		delete(h.feeds, tenant)
	}
	f.stop()
}
