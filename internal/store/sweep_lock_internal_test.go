package store

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
)

// lockFault is what lockFaults does to the next run of a lock script.
type lockFault int

const (
	passes  lockFault = iota
	unsent            // an i/o timeout before it reaches Redis
	applied           // Redis runs it, then the reply is lost
)

// lockFaults embeds the real client and applies one fault to the next
// run of a sweeper lock script (EVALSHA, or the EVAL after NOSCRIPT).
type lockFaults struct {
	*redis.Client
	next lockFault
}

func (f *lockFaults) script(ks []string, call func() *redis.Cmd, evalsha bool) *redis.Cmd {
	if len(ks) != 1 || ks[0] != keys.SweepLock || f.next == passes {
		return call()
	}
	if f.next == unsent {
		f.next = passes
		return redis.NewCmdResult(nil, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})
	}
	r := call()
	if evalsha && redis.HasErrorPrefix(r.Err(), "NOSCRIPT") {
		return r // the EVAL that follows is the run
	}
	f.next = passes
	return redis.NewCmdResult(nil, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})
}

func (f *lockFaults) EvalSha(ctx context.Context, sha string, ks []string, args ...any) *redis.Cmd {
	return f.script(ks, func() *redis.Cmd { return f.Client.EvalSha(ctx, sha, ks, args...) }, true)
}

func (f *lockFaults) Eval(ctx context.Context, src string, ks []string, args ...any) *redis.Cmd {
	return f.script(ks, func() *redis.Cmd { return f.Client.Eval(ctx, src, ks, args...) }, false)
}

// TestSweepLockSurvivesOneFailedCall (issue 22): replica a holds the
// sweeper lock; a call of its that fails in transit, sent or not, is
// followed by a round that keeps the lock with the same token, while
// replica b is refused throughout; only when the TTL ran out with a's
// rounds failing does b take it over, and a then stays out.
func TestSweepLockSurvivesOneFailedCall(t *testing.T) {
	t.Parallel()
	m, rdb := redistest.Mini(t)
	ctx := context.Background()
	faults := &lockFaults{Client: rdb}
	newLock := func(rdb RedisClient) *sweepLock {
		st, err := New(rdb, Options{SweepInterval: 10 * time.Millisecond, SweepLockTTL: time.Second})
		require.NoError(t, err)
		return st.newSweepLock()
	}
	a, b := newLock(faults), newLock(rdb)
	steps := []struct {
		name  string
		lock  *sweepLock
		fault lockFault
		held  bool
		err   bool
		// ttlPassed lets the lock's TTL run out first.
		ttlPassed bool
	}{
		{name: "a takes it", lock: a, held: true},
		{name: "b is refused", lock: b},
		{name: "a's keep times out unsent", lock: a, fault: unsent, err: true},
		{name: "b is still refused: the key holds a's token", lock: b},
		{name: "a keeps it", lock: a, held: true},
		{name: "a's keep is applied, its reply lost", lock: a, fault: applied, err: true},
		{name: "a keeps it again", lock: a, held: true},
		{name: "b is refused again", lock: b},
		{name: "a's rounds fail until its TTL is over", lock: a, fault: unsent, err: true, ttlPassed: true},
		{name: "b takes it over", lock: b, held: true},
		{name: "a stays out", lock: a},
	}
	for _, st := range steps {
		if st.ttlPassed {
			m.FastForward(time.Second + time.Millisecond)
		}
		faults.next = st.fault
		held, err := st.lock.hold(ctx)
		if st.err {
			require.Error(t, err, st.name)
		} else {
			require.NoError(t, err, st.name)
		}
		assert.Equal(t, st.held, held, st.name)
	}
	a.release(ctx)
	owner, err := m.Get(keys.SweepLock)
	require.NoError(t, err)
	assert.Equal(t, b.token, owner, "a's release does not touch b's lock")
	b.release(ctx)
	assert.False(t, m.Exists(keys.SweepLock), "b's release frees it")
}
