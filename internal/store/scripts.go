package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/breaker"
	"github.com/cooldownd/cooldownd/internal/keys"
)

// The parts of the scripts, concatenated in this order (loadScript folds
// lua/schema.lua's constants into each and keeps a line map, so a Lua
// error names the file and line it came from). A connection script is
// head.lua (the clock), its fast path if it has one (which uses only the
// folded constants, so that it answers before anything else runs),
// schema.lua's tables, the prelude's helpers by topic, then its own part.
var (
	prelude = []string{
		"lua/schema.lua",
		"lua/prelude/bind.lua",
		"lua/prelude/state.lua",
		"lua/prelude/phase.lua",
		"lua/prelude/fleet.lua",
		"lua/prelude/lease.lua",
		"lua/prelude/reply.lua",
	}
	head = "lua/head.lua"

	// The scripts that may write a transition, a lease or a count run once
	// (see luaScript); get only applies timed transitions, which a second
	// run finds already applied.
	scriptAdmit  = newScript(once, parts(head, "lua/admit_fast.lua", prelude, "lua/admit.lua")...)
	scriptReport = newScript(once, parts(head, "lua/report_fast.lua", prelude, "lua/report.lua")...)
	// scriptReportClaims is a coalesced batch's: the claims of its keyed
	// reports, then report's parts as one function (lua/claims_open.lua).
	scriptReportClaims = newScript(once, parts(head, "lua/claims_open.lua", "lua/report_fast.lua", prelude, "lua/report.lua",
		"lua/claims_close.lua")...)
	scriptForce  = newScript(once, parts(head, prelude, "lua/force.lua")...)
	scriptExtend = newScript(once, parts(head, prelude, "lua/extend.lua")...)
	scriptGet    = redisScript(parts(head, prelude, "lua/get.lua")...)
	scriptTenant = redisScript("lua/tenant.lua")
)

// parts flattens file names and lists of them, in order.
func parts(items ...any) []string {
	var out []string
	for _, it := range items {
		switch v := it.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		}
	}
	return out
}

// redisScript is a script go-redis runs as it does (EVALSHA, then EVAL).
func redisScript(files ...string) *redis.Script {
	src, _ := loadScript(files...)
	return redis.NewScript(src)
}

// connKeys are KEYS for a connection script: state, history.
func connKeys(l keys.Layout) []string { return l.Script() }

// policyArg is a connection's policy, idle TTL and history cap as one
// argument (appendPolicy, generated from internal/store/schema; P in the
// scripts, see policy_table in lua/schema.lua). It is the same for every
// call with one policy, so it is formatted once.
func (s *Store) policyArg(p breaker.Policy) string {
	if cached, ok := s.argCache.Load(p); ok {
		if a, ok := cached.(string); ok {
			return a
		}
	}
	a := string(appendPolicy(make([]byte, 0, 128), p, s.idle, s.history))
	s.argCache.Store(p, a)
	return a
}

// args builds ARGV of a one-connection script: now (head.lua), the
// connection's three (prelude/bind.lua), then the operation's own.
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

func newScript(once bool, files ...string) *luaScript {
	src, sha := loadScript(files...)
	return &luaScript{src: src, sha: sha, once: once}
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

// stateJSON is prelude/state.lua's state_table(s).
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

// reporters decodes prelude/fleet.lua's "id:at,id:at" (ids have no ':' or ',').
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

// first is the reply's first value when it is an integer (a writing
// script's STATUS), without reading it; 0 otherwise.
func (r *reply) first() int64 {
	if r.err != nil || len(r.v) == 0 {
		return 0
	}
	n, _ := r.v[0].(int64)
	return n
}

// stateReply is a state_table(s) sent as JSON: the state, the server
// clock's now and the label.
type stateReply struct {
	State breaker.State
	Now   int64
	Label string
}

func (r *reply) stateReply() stateReply {
	st, now, label := r.state()
	return stateReply{State: st, Now: now, Label: label}
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
