package store

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

var (
	//go:embed lua/head.lua
	luaHead string
	//go:embed lua/prelude.lua
	luaPrelude string
	//go:embed lua/admit_fast.lua
	luaAdmitFast string
	//go:embed lua/admit.lua
	luaAdmit string
	//go:embed lua/report_fast.lua
	luaReportFast string
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

	// A connection script is head.lua (the clock), its fast path if it has
	// one, the prelude, then its own part. The scripts that may write a
	// transition, a lease or a count run once (see luaScript); get only
	// applies timed transitions, which a second run finds already applied.
	scriptAdmit  = newScript(once, luaHead, luaAdmitFast, luaPrelude, luaAdmit)
	scriptReport = newScript(once, luaHead, luaReportFast, luaPrelude, luaReport)
	scriptForce  = newScript(once, luaHead, luaPrelude, luaForce)
	scriptExtend = newScript(once, luaHead, luaPrelude, luaExtend)
	scriptGet    = redis.NewScript(luaHead + luaPrelude + luaGet)
	scriptTenant = redis.NewScript(luaTenant)
)

// The scripts' named codes (prelude.lua's STATUS, force.lua's FORCE_RESET,
// admit.lua's UNDECIDED).
const (
	statusApplied      = 1
	statusUnregistered = 2
	statusReplayed     = 3
	statusReused       = 4
	forceReset         = 3
	admitUndecided     = breaker.Decision(0)
)

// connKeys are KEYS for a connection script: state, history.
func connKeys(l keys.Layout) []string { return l.Script() }

// policyArg is a connection's policy, idle TTL and history cap as one
// argument (bind in prelude.lua), in milliseconds where a duration: idle,
// rate basis points, window, fleet window, retry budget basis points,
// throttle K and shadow first (the fast paths read only those). It is the
// same for every call with one policy, so it is formatted once.
func (s *Store) policyArg(p breaker.Policy) string {
	if cached, ok := s.argCache.Load(p); ok {
		if a, ok := cached.(string); ok {
			return a
		}
	}
	var b []byte
	ints := func(ns ...int64) {
		for _, n := range ns {
			b = append(b, ',')
			b = strconv.AppendInt(b, n, 10)
		}
	}
	float := func(f float64) {
		b = append(b, ',')
		b = strconv.AppendFloat(b, f, 'g', -1, 64)
	}
	shadow := int64(0)
	if p.Shadow {
		shadow = 1
	}
	b = strconv.AppendInt(b, s.idle.Milliseconds(), 10)
	ints(p.RateBasisPoints(), p.Window.Milliseconds(), p.FleetWindow.Milliseconds(), p.RetryBudgetBasisPoints())
	float(p.ThrottleK)
	ints(shadow, int64(p.ConsecutiveFailures), int64(p.MinCalls), p.OpenBase.Milliseconds(), p.OpenMax.Milliseconds())
	float(p.Jitter)
	ints(p.RateLimitCooldown.Milliseconds(), p.OverloadFloor.Milliseconds(), p.QuotaBlock.Milliseconds(),
		p.AuthBlock.Milliseconds(), int64(p.MaxProbes), p.LeaseTTL.Milliseconds(), int64(p.RetryBudgetMin),
		int64(p.TripQuorum), int64(s.history))
	a := string(b)
	s.argCache.Store(p, a)
	return a
}

// args builds ARGV of a one-connection script: now (head.lua), the
// connection's three (bind in prelude.lua), then the operation's own.
func (s *Store) args(p breaker.Policy, l keys.Layout, op ...any) []any {
	a := make([]any, 0, 4+len(op))
	a = append(a, s.nowArg(), s.policyArg(p), keys.Channel(l.Tenant), l.ID.String())
	return append(a, op...)
}

// once marks a script that go-redis must never send twice (see luaScript).
const once = true

// luaScript is a script run with EVALSHA, and with EVAL once after a
// NOSCRIPT (a Redis that restarted or failed over to a replica without the
// script cache). A script run once is never resent by go-redis after it
// may have reached Redis: go-redis (MaxRetries, and the Cluster client's
// own retries) resends a command whose connection broke after it was
// written (io.EOF, a reset), and a script that ran but whose reply was
// lost would then be applied twice (a report counted twice, a second
// probe lease while the first is orphaned until its TTL, two revisions for
// one override). A command that never left the client is still retried
// (go-redis's own pre-write rule). The caller sees the error, wrapped in
// [ErrUnavailable], and decides (decision 0023).
type luaScript struct {
	src, sha string
	once     bool
}

func newScript(once bool, parts ...string) *luaScript {
	src := strings.Join(parts, "")
	sum := sha1.Sum([]byte(src))
	return &luaScript{src: src, sha: hex.EncodeToString(sum[:]), once: once}
}

// processor runs one command: a client, a held connection, a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// onceCmd is a command that go-redis does not resend after it may have
// been written (the Cmder's NoRetry).
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// queue sends (or, on a pipeline, queues) the script as verb (evalsha or
// eval) and returns its command.
func (sc *luaScript) queue(ctx context.Context, p processor, verb string, ks []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(ks)+len(args))
	a = append(a, verb, sc.sha, len(ks))
	if verb == "eval" {
		a[1] = sc.src
	}
	for _, k := range ks {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if sc.once {
		_ = p.Process(ctx, onceCmd{cmd})
	} else {
		_ = p.Process(ctx, cmd)
	}
	return cmd
}

// run runs the script on p (not a pipeline): EVALSHA, then EVAL if Redis
// does not have it cached.
func (sc *luaScript) run(ctx context.Context, p processor, ks []string, args ...any) *redis.Cmd {
	cmd := sc.queue(ctx, p, "evalsha", ks, args)
	if noScript(cmd.Err()) {
		cmd = sc.queue(ctx, p, "eval", ks, args)
	}
	return cmd
}

// noScript reports whether err says that Redis does not have the script:
// it was not run, so sending it in full is its first run.
func noScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

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
	FleetStart    int64  `json:"fleet_start"`
	PrevFirsts    int64  `json:"prev_firsts"`
	CurFirsts     int64  `json:"cur_firsts"`
	PrevRetries   int64  `json:"prev_retries"`
	CurRetries    int64  `json:"cur_retries"`
	PrevRequests  int64  `json:"prev_requests"`
	CurRequests   int64  `json:"cur_requests"`
	PrevAccepts   int64  `json:"prev_accepts"`
	CurAccepts    int64  `json:"cur_accepts"`
	Reporters     string `json:"reporters"`
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
		Fleet: breaker.Fleet{Start: j.FleetStart, PrevFirsts: j.PrevFirsts, CurFirsts: j.CurFirsts,
			PrevRetries: j.PrevRetries, CurRetries: j.CurRetries, PrevRequests: j.PrevRequests, CurRequests: j.CurRequests,
			PrevAccepts: j.PrevAccepts, CurAccepts: j.CurAccepts},
		Reporters: reporters(j.Reporters),
	}
	for _, l := range j.Leases {
		st.Leases = append(st.Leases, breaker.Lease{Slot: l.Slot, Token: l.Token, Granted: tokenGranted(l.Token), Expires: l.Expires})
	}
	return st, j.Now, j.Label
}

// reporters decodes prelude.lua's "id:at,id:at" (ids have no ':' or ',').
func reporters(s string) []breaker.Reporter {
	var out []breaker.Reporter
	for item := range strings.SplitSeq(s, ",") {
		id, at, ok := strings.Cut(item, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, breaker.Reporter{ID: id, At: n})
	}
	return out
}

// prob reads a probability the scripts send as a string ('%.17g').
func (r *reply) prob() float64 {
	x := r.str()
	if r.err != nil {
		return 0
	}
	f, err := strconv.ParseFloat(x, 64)
	if err != nil {
		r.err = fmt.Errorf("store: script reply value %d is %q, not a number", r.i-1, x)
	}
	return f
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
