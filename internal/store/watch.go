package store

import (
	"context"
	"log/slog"

	"github.com/cooldownd/cooldownd/internal/keys"
)

// Watch streams a tenant's transitions until ctx ends. The channel closes
// when ctx ends or the subscription fails; callers resubscribe (and re-read
// state) to recover. Pub/sub is at-most-once: a watcher that was away
// re-reads with List.
func (s *Store) Watch(ctx context.Context, tenant string) (<-chan Transition, error) {
	sub := s.rdb.Subscribe(ctx, keys.Channel(tenant))
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return nil, unavailable("watch", err)
	}
	out := make(chan Transition, 64)
	go func() {
		defer close(out)
		defer func() { _ = sub.Close() }()
		msgs := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				t, err := decodeEvent(tenant, m.Payload)
				if err != nil {
					slog.WarnContext(ctx, "dropping malformed event", "tenant", tenant, "err", err)
					continue
				}
				select {
				case out <- t:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
