package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

// spin keeps Redis busy for ARGV[1] ms: commands sent meanwhile wait in
// their sockets and run when it ends, after their clients timed out.
const spin = `local t0 = redis.call('TIME')
repeat local t = redis.call('TIME') until (t[1] - t0[1]) * 1e6 + (t[2] - t0[2]) >= tonumber(ARGV[1]) * 1000
return 1`

// whileBusy runs op while Redis (at addr) runs a 700 ms script, and waits
// until Redis ran everything op sent. It returns op's error, or false when
// op could not be sent while Redis was busy (the machine was too slow to
// start the script first).
func whileBusy(t *testing.T, addr string, op func() error) (error, bool) {
	t.Helper()
	ctx := context.Background()
	busy := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second})
	defer func() { _ = busy.Close() }()
	probe := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 50 * time.Millisecond, MaxRetries: -1})
	defer func() { _ = probe.Close() }()
	require.NoError(t, probe.Ping(ctx).Err())
	done := make(chan error, 1)
	go func() { done <- busy.Eval(ctx, spin, nil, 700).Err() }()
	// Redis is busy once a PING times out.
	started := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if err := probe.Ping(ctx).Err(); err != nil {
			started = true
			break
		}
	}
	var err error
	if started {
		err = op()
	}
	require.NoError(t, <-done)
	// Sent after the spin ended: it runs after what op left in its sockets.
	require.NoError(t, busy.Ping(ctx).Err())
	return err, started
}

// loseReply is a connection whose first command holding marker reaches
// Redis, runs, and has its reply lost: the connection breaks (io.EOF) once
// the reply starts to arrive, as when a link or a proxy between the
// server and Redis fails at that moment.
type loseReply struct {
	net.Conn
	marker []byte
	armed  *atomic.Bool // one loss per test, shared by the pool's connections
	lose   bool
}

func (c *loseReply) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.marker) && c.armed.CompareAndSwap(true, false) {
		c.lose = true
	}
	return c.Conn.Write(b)
}

func (c *loseReply) Read(b []byte) (int, error) {
	if !c.lose {
		return c.Conn.Read(b)
	}
	// The script ran before the first byte of its reply was sent.
	if _, err := c.Conn.Read(b); err != nil {
		return 0, err
	}
	_ = c.Conn.Close()
	return 0, io.EOF
}

// TestScriptsNotResentAfterALostReply: a report whose reply is lost after
// Redis ran it is not sent again by go-redis (whose MaxRetries resends a
// command after io.EOF, and Redis would apply it once per send: a success
// counted twice). The control shows that the same client does resend an
// ordinary script.
func TestScriptsNotResentAfterALostReply(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		marker string
		// run arms the loss, runs the op and says how many times it applied.
		run func(rdb *redis.Client, arm func()) (int64, error)
	}{
		{"control: an ordinary script is resent", "control-key", func(rdb *redis.Client, arm func()) (int64, error) {
			arm()
			err := rdb.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{"control-key"}).Err()
			n, gerr := rdb.Get(ctx, "control-key").Int64()
			require.NoError(t, gerr)
			return n, err
		}},
		{"a report runs once", keys.ID{9}.String(), func(rdb *redis.Client, arm func()) (int64, error) {
			st, err := store.New(rdb, store.Options{})
			require.NoError(t, err)
			c := store.Conn{Tenant: "once", ID: keys.ID{9}}
			res, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess}) // creates it
			require.NoError(t, err)
			arm()
			_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, Revision: res.Revision})
			snap, _, gerr := st.Get(ctx, c.Tenant, c.ID, 0)
			require.NoError(t, gerr)
			return snap.State.Successes - 1, err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			armed := &atomic.Bool{}
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MinRetryBackoff: time.Millisecond,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &loseReply{Conn: c, marker: []byte(tc.marker), armed: armed}, nil
				}})
			t.Cleanup(func() { _ = rdb.Close() })
			require.Equal(t, 3, rdb.Options().MaxRetries)
			n, err := tc.run(rdb, func() { armed.Store(true) })
			require.False(t, armed.Load(), "the reply was never lost")
			if strings.HasPrefix(tc.name, "control") {
				require.NoError(t, err, "resent, the second reply arrived")
				assert.Equal(t, int64(2), n, "go-redis resent the script and Redis ran it twice")
				return
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, store.ErrUnavailable), "a broken link is unavailable: %v", err)
			assert.Equal(t, int64(1), n, "the report ran once (it was applied, its reply was lost)")
		})
	}
}

// TestReportTimedOutOnABusyRedis: a report whose reply times out while
// Redis is busy (a slow script of someone else's) answers unavailable and
// is applied once, when Redis gets to it. go-redis v9.23 does not resend a
// command whose read timed out; the store's scripts would not be resent
// if it did (see TestScriptsNotResentAfterALostReply).
func TestReportTimedOutOnABusyRedis(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	ctx := context.Background()
	// Idle connections ready in the pool: a new one could not even say
	// HELLO to a busy Redis.
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: 100 * time.Millisecond,
		MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond, MinIdleConns: 4})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Options{})
	require.NoError(t, err)
	c := store.Conn{Tenant: "busy", ID: keys.ID{8}}
	_, err = st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess})
	require.NoError(t, err)
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 3, "Redis was never busy in time")
		snap, _, err := st.Get(ctx, c.Tenant, c.ID, 0)
		require.NoError(t, err)
		before := snap.State.Successes
		for i := 0; rdb.PoolStats().IdleConns < 4; i++ {
			require.Less(t, i, 500, "the pool never filled")
			time.Sleep(10 * time.Millisecond)
		}
		err, ok := whileBusy(t, s.Addr, func() error {
			_, err := st.Report(ctx, c, breaker.Report{Outcome: breaker.OutcomeSuccess, Revision: snap.State.Revision})
			return err
		})
		if !ok {
			continue
		}
		require.Error(t, err)
		assert.True(t, errors.Is(err, store.ErrUnavailable), "a timeout is unavailable: %v", err)
		snap, _, err = st.Get(ctx, c.Tenant, c.ID, 0)
		require.NoError(t, err)
		assert.Equal(t, before+1, snap.State.Successes, "the report ran once, after the busy script")
		return
	}
}
