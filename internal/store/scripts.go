package store

import (
	_ "embed"
	"encoding/json"
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
	//go:embed lua/tenant.lua
	luaTenant string

	scriptAdmit  = redis.NewScript(luaPrelude + luaAdmit)
	scriptReport = redis.NewScript(luaPrelude + luaReport)
	scriptForce  = redis.NewScript(luaPrelude + luaForce)
	scriptGet    = redis.NewScript(luaPrelude + luaGet)
	scriptExtend = redis.NewScript(luaPrelude + luaExtend)
	scriptTenant = redis.NewScript(luaTenant)
)

// The scripts' named codes (prelude.lua's STATUS, force.lua's FORCE_RESET).
const (
	statusApplied      = 1
	statusUnregistered = 2
	forceReset         = 3
)

// connKeys are KEYS for a connection script: state, history.
func connKeys(l keys.Layout) []string { return l.Script() }

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

// stateJSON is prelude.lua's state_table(s).
type stateJSON struct {
	Now           int64  `json:"now"`
	Phase         int    `json:"phase"`
	Cause         int    `json:"cause"`
	Revision      uint64 `json:"revision"`
	OpenUntil     int64  `json:"open_until"`
	Reopens       int    `json:"reopens"`
	Consecutive   int    `json:"consecutive"`
	Override      int    `json:"override"`
	OverrideUntil int64  `json:"override_until"`
	Successes     int64  `json:"successes"`
	Failures      int64  `json:"failures"`
	LastStatus    int    `json:"last_status"`
	LastOutcome   int    `json:"last_outcome"`
	LastError     string `json:"last_error"`
	ChangedAt     int64  `json:"changed_at"`
	UpdatedAt     int64  `json:"updated_at"`
	Label         string `json:"label"`
	WindowStart   int64  `json:"window_start"`
	PrevCalls     int64  `json:"prev_calls"`
	PrevFails     int64  `json:"prev_fails"`
	CurCalls      int64  `json:"cur_calls"`
	CurFails      int64  `json:"cur_fails"`
	Leases        []struct {
		Slot    int    `json:"slot"`
		Token   string `json:"token"`
		Expires int64  `json:"expires"`
	} `json:"leases"`
}

// state converts the script's state to the model's, with the label and
// the server clock's now.
func (j *stateJSON) state() (breaker.State, int64, string) {
	st := breaker.State{
		Phase: breaker.Phase(j.Phase), Cause: breaker.Cause(j.Cause), Revision: j.Revision,
		OpenUntil: j.OpenUntil, Reopens: j.Reopens, Consecutive: j.Consecutive,
		Override: breaker.Override(j.Override), OverrideUntil: j.OverrideUntil,
		Successes: j.Successes, Failures: j.Failures, LastStatus: j.LastStatus,
		LastOutcome: breaker.Outcome(j.LastOutcome), LastErrorCode: j.LastError,
		ChangedAt: j.ChangedAt, UpdatedAt: j.UpdatedAt,
		Window: breaker.Window{Start: j.WindowStart, PrevCalls: j.PrevCalls, PrevFails: j.PrevFails, CurCalls: j.CurCalls, CurFails: j.CurFails},
	}
	for _, l := range j.Leases {
		st.Leases = append(st.Leases, breaker.Lease{Slot: l.Slot, Token: l.Token, Granted: tokenGranted(l.Token), Expires: l.Expires})
	}
	return st, j.Now, j.Label
}

// state decodes a state_table(s) sent as JSON.
func (r *reply) state() (breaker.State, int64, string) {
	js := r.str()
	if r.err != nil {
		return breaker.State{}, 0, ""
	}
	var j stateJSON
	if err := json.Unmarshal([]byte(js), &j); err != nil {
		r.err = fmt.Errorf("store: script state: %w", err)
		return breaker.State{}, 0, ""
	}
	return j.state()
}

// strs reads a nested array of strings.
func (r *reply) strs() []string {
	x := r.next()
	if r.err != nil {
		return nil
	}
	arr, ok := x.([]any)
	if !ok {
		r.err = fmt.Errorf("store: script reply value %d is %T, not an array", r.i-1, x)
		return nil
	}
	out := make([]string, 0, len(arr))
	for _, v := range arr {
		s, ok := v.(string)
		if !ok {
			r.err = fmt.Errorf("store: script reply value %d holds %T, not a string", r.i-1, v)
			return nil
		}
		out = append(out, s)
	}
	return out
}

// events decodes the end of reply(): the transitions a script applied
// (time and revision are not carried; the history has them).
func (r *reply) events() []breaker.Event {
	n := r.int()
	var evs []breaker.Event
	for range n {
		evs = append(evs, breaker.Event{From: breaker.Phase(r.int()), To: breaker.Phase(r.int()), Cause: breaker.Cause(r.int())})
	}
	return evs
}
