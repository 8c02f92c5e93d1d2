package store

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// TestErrorClasses drives real Redis servers into each failure and checks
// its class: only a Redis that cannot be reached or cannot answer in time
// is unavailable (clients degrade on it); what retrying will not cure is
// internal.
func TestErrorClasses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	require.NoError(t, rdb.Set(ctx, "str", "x", 0).Err())
	require.NoError(t, rdb.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+ping").Err())
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "limited", Password: "pw"})
	t.Cleanup(func() { _ = limited.Close() })
	wrongPass := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "limited", Password: "nope", MaxRetries: -1})
	t.Cleanup(func() { _ = wrongPass.Close() })
	replica := redistest.StartServer(t, "--replicaof", "127.0.0.1", srv.Addr[len("127.0.0.1:"):])
	rrdb := redis.NewClient(&redis.Options{Addr: replica.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rrdb.Close() })

	refused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = refused.Close() })
	// A listener that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	silent := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = silent.Close() })
	closed := redis.NewClient(&redis.Options{Addr: srv.Addr})
	_ = closed.Close()

	tctx := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	tests := []struct {
		name      string
		err       error
		transient bool
	}{
		{"WRONGTYPE", rdb.HGetAll(ctx, "str").Err(), false},
		{"script error", rdb.Eval(ctx, "return redis.call('NOSUCHCOMMAND')", nil).Err(), false},
		{"script runtime error", rdb.Eval(ctx, "return redis.call('HGET', KEYS[1], 'f')", []string{"str"}).Err(), false},
		{"NOPERM", limited.Eval(ctx, "return 1", nil).Err(), false},
		{"wrong password", wrongPass.Ping(ctx).Err(), false},
		{"malformed reply", newReply("not an array", nil).err, false},
		{"short reply", func() error { r := newReply([]any{}, nil); r.int(); return r.err }(), false},
		{"READONLY replica", rrdb.Set(ctx, "k", "v", 0).Err(), true},
		{"connection refused", refused.Ping(ctx).Err(), true},
		{"no answer in time", silent.Ping(tctx()).Err(), true},
		{"client closed", closed.Ping(ctx).Err(), true},
		{"canceled", context.Canceled, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Error(t, tt.err)
			got := unavailable("op", tt.err)
			assert.Equal(t, tt.transient, errors.Is(got, ErrUnavailable), "%v", got)
			assert.Equal(t, !tt.transient, errors.Is(got, ErrInternal), "%v", got)
			assert.ErrorIs(t, got, tt.err, "the cause stays in the chain")
		})
	}
}

// TestCrossSlotIsInternal: a script over keys of several Cluster slots is
// a bug, not an outage.
func TestCrossSlotIsInternal(t *testing.T) {
	t.Parallel()
	cc := redistest.Cluster(t)
	err := cc.Eval(context.Background(), "return 1", []string{"a", "b"}).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CROSSSLOT")
	got := unavailable("op", err)
	assert.ErrorIs(t, got, ErrInternal)
	assert.NotErrorIs(t, got, ErrUnavailable)
}

// TestStoreCallsClassifyRealFailures: the same classes through the
// store's own calls on real Redis: a state key of the wrong type and an
// ACL user without EVALSHA are internal; a Redis that is gone is
// unavailable.
func TestStoreCallsClassifyRealFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	c := Conn{Tenant: "t", ID: keys.ID{1}}
	require.NoError(t, admin.Set(ctx, c.layout().State(), "not a hash", 0).Err())
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "reader", "on", ">pw", "~*", "+@read", "+ping").Err())

	st, err := New(admin, Options{})
	require.NoError(t, err)
	_, err = st.Admit(ctx, c)
	assert.ErrorIs(t, err, ErrInternal, "WRONGTYPE at the state key: %v", err)
	assert.NotErrorIs(t, err, ErrUnavailable)

	reader := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "reader", Password: "pw"})
	t.Cleanup(func() { _ = reader.Close() })
	rst, err := New(reader, Options{})
	require.NoError(t, err)
	_, err = rst.Admit(ctx, Conn{Tenant: "t", ID: keys.ID{2}})
	assert.ErrorIs(t, err, ErrInternal, "NOPERM: %v", err)
	assert.Contains(t, err.Error(), "NOPERM")

	srv.Stop()
	_, err = st.Admit(ctx, Conn{Tenant: "t", ID: keys.ID{3}})
	assert.ErrorIs(t, err, ErrUnavailable, "Redis gone: %v", err)
	assert.ErrorIs(t, st.Ping(ctx), ErrUnavailable)
	_, _, err = st.ClaimBatch(ctx, "t", "batch-key-0123456789", "d:01")
	assert.ErrorIs(t, err, ErrUnavailable, "a batch's claim, Redis gone: %v", err)
}
