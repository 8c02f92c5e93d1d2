package main

import (
	"context"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// embedded is the in-process Redis of the no-setup default.
type embedded struct {
	mini   *miniredis.Miniredis
	client *redis.Client
	stop   chan struct{}
	wg     sync.WaitGroup
}

// startEmbedded starts miniredis on loopback. miniredis expires keys only
// when told time passed, so a ticker fast-forwards it with the wall clock:
// probe leases and idle connections expire as they would on a real Redis.
func startEmbedded() (*embedded, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, err
	}
	e := &embedded{mini: m, client: redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true}), stop: make(chan struct{})}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-e.stop:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	if err := e.client.Ping(context.Background()).Err(); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *embedded) close() {
	close(e.stop)
	e.wg.Wait()
	_ = e.client.Close()
	e.mini.Close()
}
