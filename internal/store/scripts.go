package store

import (
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

var (
	//go:embed lua/prelude.lua
	luaPrelude string
	//go:embed lua/admit.lua
	luaAdmit string
	//go:embed lua/report.lua
	luaReport string
	//go:embed lua/force.lua
	luaForce string
	//go:embed lua/get.lua
	luaGet string
	//go:embed lua/extend.lua
	luaExtend string

	scriptAdmit  = redis.NewScript(luaPrelude + luaAdmit)
	scriptReport = redis.NewScript(luaPrelude + luaReport)
	scriptForce  = redis.NewScript(luaPrelude + luaForce)
	scriptGet    = redis.NewScript(luaPrelude + luaGet)
	scriptExtend = redis.NewScript(luaPrelude + luaExtend)
)

// forceReset is the force script's code for a reset.
const forceReset = 3

// connKeys are KEYS for a connection script: state, history, lease slots.
func connKeys(l keys.Layout, maxProbes int) []string { return l.Script(maxProbes) }

// policyArgs is ARGV[2..16]: the policy, idle TTL and history cap, as
// strings. They are the same for every call with one policy, so they are
// formatted once and reused (no per-request boxing).
func (s *Store) policyArgs(p breaker.Policy) []any {
	if cached, ok := s.argCache.Load(p); ok {
		if a, ok := cached.([]any); ok {
			return a
		}
	}
	a := []any{}
	for _, n := range []int64{
		int64(p.ConsecutiveFailures), p.RateBasisPoints(), int64(p.MinCalls), p.Window.Milliseconds(),
		p.OpenBase.Milliseconds(), p.OpenMax.Milliseconds(),
	} {
		a = append(a, strconv.FormatInt(n, 10))
	}
	a = append(a, strconv.FormatFloat(p.Jitter, 'g', -1, 64))
	for _, n := range []int64{
		p.RateLimitDefault.Milliseconds(), p.OverloadFloor.Milliseconds(), p.QuotaBlock.Milliseconds(),
		p.AuthBlock.Milliseconds(), int64(p.MaxProbes), p.LeaseTTL.Milliseconds(), s.idle.Milliseconds(), int64(s.history),
	} {
		a = append(a, strconv.FormatInt(n, 10))
	}
	s.argCache.Store(p, a)
	return a
}

// args builds ARGV: the prelude's common part, then the operation's own.
func (s *Store) args(p breaker.Policy, l keys.Layout, op ...any) []any {
	now := "0"
	if s.clock != nil {
		now = strconv.FormatInt(s.clock().UnixMilli(), 10)
	}
	pa := s.policyArgs(p)
	a := make([]any, 0, 3+len(pa)+len(op))
	a = append(a, now)
	a = append(a, pa...)
	a = append(a, keys.Channel(l.Tenant), l.ID.String())
	return append(a, op...)
}

// reply reads a script's array reply with checked conversions.
type reply struct {
	v   []any
	i   int
	err error
}

func newReply(v any, err error) *reply {
	if err != nil {
		return &reply{err: err}
	}
	arr, ok := v.([]any)
	if !ok {
		return &reply{err: fmt.Errorf("store: script reply is %T, not an array", v)}
	}
	return &reply{v: arr}
}

func (r *reply) next() any {
	if r.err != nil {
		return nil
	}
	if r.i >= len(r.v) {
		r.err = fmt.Errorf("store: script reply too short (%d values)", len(r.v))
		return nil
	}
	r.i++
	return r.v[r.i-1]
}

func (r *reply) int() int64 {
	x := r.next()
	if r.err != nil {
		return 0
	}
	n, ok := x.(int64)
	if !ok {
		r.err = fmt.Errorf("store: script reply value %d is %T, not an integer", r.i-1, x)
	}
	return n
}

func (r *reply) str() string {
	x := r.next()
	if r.err != nil {
		return ""
	}
	s, ok := x.(string)
	if !ok {
		r.err = fmt.Errorf("store: script reply value %d is %T, not a string", r.i-1, x)
	}
	return s
}

// state decodes the prelude's encode(s).
func (r *reply) state() (breaker.State, int64, string) {
	now := r.int()
	st := breaker.State{
		Phase: breaker.Phase(r.int()), Cause: breaker.Cause(r.int()), Revision: uint64(r.int()),
		OpenUntil: r.int(), Reopens: int(r.int()), Consecutive: int(r.int()),
		Override: breaker.Override(r.int()), OverrideUntil: r.int(),
		Successes: r.int(), Failures: r.int(), LastStatus: int(r.int()),
		LastOutcome: breaker.Outcome(r.int()), LastErrorCode: r.str(),
		ChangedAt: r.int(), UpdatedAt: r.int(),
	}
	label := r.str()
	st.Window = breaker.Window{Start: r.int(), PrevCalls: r.int(), PrevFails: r.int(), CurCalls: r.int(), CurFails: r.int()}
	n := r.int()
	for range n {
		l := breaker.Lease{Slot: int(r.int()), Token: r.str(), Expires: r.int()}
		l.Granted = tokenGranted(l.Token)
		st.Leases = append(st.Leases, l)
	}
	return st, now, label
}

// events decodes with_events: the transitions a script applied (time and
// revision are not carried; the history has them).
func (r *reply) events() []breaker.Event {
	n := r.int()
	var evs []breaker.Event
	for range n {
		evs = append(evs, breaker.Event{From: breaker.Phase(r.int()), To: breaker.Phase(r.int()), Cause: breaker.Cause(r.int())})
	}
	return evs
}
