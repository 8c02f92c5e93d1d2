package store

import (
	"context"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// watchBuffer is how many transitions a watcher may lag behind before it
// is dropped (its channel closes; it re-reads state and watches again).
const watchBuffer = 256

// feed is one tenant's shared subscription, fanned out to its watchers,
// so that N watchers of a tenant cost one Redis connection per replica.
type feed struct {
	sub  *redis.PubSub
	subs map[chan Transition]struct{}
	stop context.CancelFunc
}

// hub holds the live feeds of a Store.
type hub struct {
	mu    sync.Mutex
	feeds map[string]*feed
}

// Watch streams a tenant's transitions until ctx ends. The channel closes
// when ctx ends, when the watcher falls more than a buffer behind, or when
// the subscription fails; callers re-read state and watch again. Pub/sub is
// at-most-once: a watcher that was away re-reads with List.
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

func (h *hub) join(s *Store, ctx context.Context, tenant string, ch chan Transition) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.feeds == nil {
		h.feeds = map[string]*feed{}
	}
	if f, ok := h.feeds[tenant]; ok {
		f.subs[ch] = struct{}{}
		return nil
	}
	// The first watcher of a tenant on this replica opens its subscription
	// and waits until Redis confirms it, so no event after Watch returns is
	// missed.
	sub := s.rdb.Subscribe(ctx, keys.Channel(tenant))
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return unavailable("watch", err)
	}
	fctx, stop := context.WithCancel(context.Background())
	f := &feed{sub: sub, subs: map[chan Transition]struct{}{ch: {}}, stop: stop}
	h.feeds[tenant] = f
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
	if len(f.subs) == 0 {
		delete(h.feeds, tenant)
		f.stop()
	}
}

// pump fans a tenant's events out until the feed stops or fails.
func (h *hub) pump(ctx context.Context, tenant string, f *feed) {
	defer func() { _ = f.sub.Close() }()
	msgs := f.sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				h.fail(tenant, f)
				return
			}
			t, err := decodeEvent(tenant, m.Payload)
			if err != nil {
				slog.Warn("dropping malformed event", "tenant", tenant, "err", err)
				continue
			}
			h.deliver(tenant, f, t)
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

// fail ends every watcher of a feed whose subscription ended.
func (h *hub) fail(tenant string, f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range f.subs {
		close(ch)
	}
	f.subs = nil
	if h.feeds[tenant] == f {
		delete(h.feeds, tenant)
	}
	f.stop()
}
