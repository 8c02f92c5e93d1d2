-- cooldownd: shared prelude of every connection script, run after head.lua
-- (the clock) and, for admit and report, after their fast path. It mirrors
-- internal/breaker (the reference model) line by line; a differential test
-- holds the two together. Keep them in step.
--
-- A script binds one connection at a time (bind below): KEYS[2k-1] its
-- state hash, KEYS[2k] its history list (one hash tag: one Cluster slot),
-- and three ARGV from base: the packed policy (policyArg in scripts.go),
-- the event channel, the connection id hex. ARGV[1] is now (head.lua).
--
-- Every timing decision is made here from now and the expiries stored in
-- the state hash (open until, override until, each lease's expiry); key
-- TTLs only collect garbage.

-- The numbers of internal/breaker's enums (and of the wire enums);
-- names_test.go checks them against the Go constants.
local DECISION = {ALLOW = 1, ALLOW_PROBE = 2, DENY = 3}
local REASON = {NONE = 0, COOLDOWN = 1, OPEN = 2, PROBE_IN_FLIGHT = 3, QUOTA = 4, AUTH = 5, FORCED_OPEN = 6,
  OVERLOADED = 7, RETRY_BUDGET = 8, THROTTLED = 9}
local PHASE = {CLOSED = 1, OPEN = 2, HALF_OPEN = 3}
local CAUSE = {NONE = 0, BREAKER = 1, RATE_LIMIT = 2, OVERLOAD = 3, QUOTA = 4, AUTH = 5, FORCED = 6, RESET = 7,
  PROBE_SUCCESS = 8, OPEN_EXPIRED = 9, FORCE_EXPIRED = 10, OVERRIDE_CLEARED = 11}
local OUTCOME = {SUCCESS = 1, TRANSIENT_FAILURE = 2, RATE_LIMITED = 3, OVERLOADED = 4, QUOTA_EXHAUSTED = 5,
  AUTH_FAILURE = 6, CLIENT_ERROR = 7, CANCELED = 8}
local OVERRIDE = {NONE = 0, FORCED_OPEN = 1, FORCED_CLOSED = 2}
local MAX_COUNT, MAX_REOPENS = 100000, 64
-- internal/breaker's ThrottleRetryAfter (ms).
local THROTTLE_RETRY_AFTER = 1000
-- STATUS is the first value of a writing script's reply: APPLIED, or
-- UNREGISTERED when the connection does not exist and the store has not
-- just registered it in its tenant's index (see register in tenant.lua):
-- nothing was written, the store registers it and runs the script again.
-- A report also answers REPLAYED, the reply of its first run (its
-- idempotency key named a report already applied), or REUSED, alone (the
-- key named a different report): see report_fast.lua.
local STATUS = {APPLIED = 1, UNREGISTERED = 2, REPLAYED = 3, REUSED = 4}

-- The bound connection (see bind): its keys, policy, idle TTL, history
-- cap, event channel and id, and the transitions applied to it so far.
local S, H, P, IDLE, HCAP, CHAN, ID
local events = {}

-- bind makes the k-th connection of KEYS, with its three ARGV from base,
-- the one the functions below work on. The policy is one argument, the
-- numbers of policyArg (scripts.go) in order; it is parsed here, only on
-- the paths that need it.
local function bind(k, base)
  S, H = KEYS[2 * k - 1], KEYS[2 * k]
  local v, i = {}, 0
  for x in string.gmatch(ARGV[base], '[^,]+') do
    i = i + 1
    v[i] = tonumber(x)
  end
  IDLE, HCAP = v[1], v[21]
  P = {
    rate_bp = v[2], window = v[3], fleet_window = v[4], budget_bp = v[5], throttle_k = v[6], shadow = v[7],
    consecutive = v[8], min_calls = v[9], open_base = v[10], open_max = v[11], jitter = v[12],
    rate_limit_default = v[13], overload_floor = v[14], quota_block = v[15], auth_block = v[16],
    max_probes = v[17], lease_ttl = v[18], budget_min = v[19], quorum = v[20],
  }
  CHAN, ID = ARGV[base + 1], ARGV[base + 2]
  events = {}
end

-- The state hash's fields: STATE_FIELDS[i] is stored as HASH_FIELDS[i].
-- The hash names are short (one hash per connection) and stable across
-- versions; TEXT_FIELDS are strings, the others integers.
local STATE_FIELDS = {'phase', 'cause', 'revision', 'open_until', 'reopens', 'consecutive', 'window_start',
  'prev_calls', 'prev_fails', 'cur_calls', 'cur_fails', 'override', 'override_until', 'successes', 'failures',
  'last_status', 'last_outcome', 'last_error', 'changed_at', 'updated_at', 'label', 'fleet_start', 'prev_firsts',
  'cur_firsts', 'prev_retries', 'cur_retries', 'prev_requests', 'cur_requests', 'prev_accepts', 'cur_accepts',
  'reporters'}
local HASH_FIELDS = {'ph', 'ca', 'rv', 'ou', 'ro', 'cf', 'ws', 'wpc', 'wpf', 'wcc', 'wcf', 'ov', 'ovu', 'sc', 'fc',
  'ls', 'lo', 'le', 'cat', 'uat', 'lb', 'fs', 'fpf', 'fcf', 'fpr', 'fcr', 'fpq', 'fcq', 'fpa', 'fca', 'qr'}
-- reporters is the trip quorum's "id:at,id:at" (internal/breaker's
-- State.Reporters, oldest first; ids have no ':' or ',').
local TEXT_FIELDS = {last_error = true, label = true, reporters = true}
local NFIELDS = #STATE_FIELDS
-- Lease slot n is two fields: its token and its expiry (Unix ms). A token
-- whose lease lapsed stays until the slot is granted again, which is how a
-- grant knows that the previous holder never reported.
local LEASE_TOKEN, LEASE_EXPIRES = 'lt', 'lx'
-- EXPIRES_AT is when the state's keys expire (Unix ms, 0: never), kept
-- beside them so that a fast path knows without a command whether their
-- time to live is due for a refresh (see report_fast.lua).
local EXPIRES_AT = 'xp'

local function lease_fields(slot) return LEASE_TOKEN .. slot, LEASE_EXPIRES .. slot end

local function load()
  -- One HMGET: the state's fields, when the keys expire, then each slot's
  -- token and expiry.
  local names = HASH_FIELDS
  names[NFIELDS + 1] = EXPIRES_AT
  for slot = 0, P.max_probes - 1 do
    names[NFIELDS + 2 * slot + 2], names[NFIELDS + 2 * slot + 3] = lease_fields(slot)
  end
  local v = redis.call('HMGET', S, unpack(names))
  for i = #names, NFIELDS + 1, -1 do names[i] = nil end
  -- raw keeps the stored strings: save writes only the fields that changed.
  local s = {exists = false, leases = {}, lapsed = {}, raw = v, xp = tonumber(v[NFIELDS + 1])}
  for i = 1, NFIELDS do
    local f, x = STATE_FIELDS[i], v[i]
    if x then s.exists = true end
    if TEXT_FIELDS[f] then s[f] = x or '' else s[f] = tonumber(x) or 0 end
  end
  if s.phase == 0 then s.phase = PHASE.CLOSED end
  for slot = 0, P.max_probes - 1 do
    local tok = v[NFIELDS + 2 * slot + 2]
    local expires = tonumber(v[NFIELDS + 2 * slot + 3]) or 0
    if tok then
      s.exists = true
      -- A lease is live while its expiry is ahead of now and it belongs to
      -- the current revision (the token's first field; every transition
      -- deletes the slots, this only guards against older data).
      local _, _, trev, granted = string.find(tok, '^(%d+)%.%d+%.(%d+)%.')
      if tonumber(trev) == s.revision and expires > now then
        table.insert(s.leases, {slot = slot, token = tok, granted = tonumber(granted) or 0, expires = expires})
      else
        s.lapsed[slot] = true
      end
    end
  end
  return s
end

local function deadline(s)
  if s.override ~= OVERRIDE.NONE then return s.override_until end
  if s.phase == PHASE.OPEN then return s.open_until end
  return 0
end

-- expiry is when the state's and the history's keys must expire from now
-- (garbage collection only: every decision reads the stored expiries), 0
-- for never: an override without an end lasts until changed (denied
-- callers write nothing that would refresh it).
local function expiry(s)
  if s.override ~= OVERRIDE.NONE and s.override_until == 0 then return 0 end
  local ttl = IDLE
  local d = deadline(s)
  if d > now then ttl = IDLE + (d - now) end
  for _, l in ipairs(s.leases) do ttl = math.max(ttl, l.expires - now) end
  return now + ttl
end

-- keep sets the state's and the history's time to live (see expiry) and
-- records it in the state (EXPIRES_AT) when it moved.
local function keep(s)
  local e = expiry(s)
  if e == 0 then
    redis.call('PERSIST', S)
    redis.call('PERSIST', H)
  else
    redis.call('PEXPIRE', S, e - now)
    redis.call('PEXPIRE', H, e - now)
  end
  s.expires_at = e
  if s.xp ~= e then
    redis.call('HSET', S, EXPIRES_AT, string.format('%d', e))
    s.xp = e
  end
end

-- save writes the fields that changed since load (and EXPIRES_AT) in one
-- HSET, then sets the keys' time to live.
local function save(s)
  local args, raw, n = {}, s.raw or {}, 0
  for i = 1, NFIELDS do
    local f = STATE_FIELDS[i]
    local x = s[f]
    if not TEXT_FIELDS[f] then x = string.format('%d', x) end
    if x ~= raw[i] then
      args[n + 1], args[n + 2] = HASH_FIELDS[i], x
      n = n + 2
      raw[i] = x
    end
  end
  local e = expiry(s)
  if e ~= s.xp then
    args[n + 1], args[n + 2] = EXPIRES_AT, string.format('%d', e)
    n = n + 2
    s.xp = e
  end
  if n > 0 then redis.call('HSET', S, unpack(args)) end
  keep(s)
end

-- wake is when the store's sweeper must look at this connection next: its
-- next deadline, or when its keys expire (0: neither).
local function wake(s)
  local d, e = deadline(s), s.expires_at
  if e == nil then
    local ttl = redis.call('PTTL', S)
    e = 0
    if ttl > 0 then e = now + ttl end
  end
  if d > 0 and (e == 0 or d < e) then return d end
  return e
end

-- state_table is the state as returned to Go and published with events
-- (stateJSON in scripts.go), a named table encoded as JSON.
local function state_table(s)
  local leases = nil
  if #s.leases > 0 then
    leases = {}
    for i, l in ipairs(s.leases) do leases[i] = {slot = l.slot, token = l.token, expires = l.expires} end
  end
  return {
    now = now, phase = s.phase, cause = s.cause, revision = s.revision, open_until = s.open_until,
    reopens = s.reopens, consecutive = s.consecutive, override = s.override, override_until = s.override_until,
    successes = s.successes, failures = s.failures, last_status = s.last_status, last_outcome = s.last_outcome,
    last_error = s.last_error, changed_at = s.changed_at, updated_at = s.updated_at, label = s.label,
    window_start = s.window_start, prev_calls = s.prev_calls, prev_fails = s.prev_fails,
    cur_calls = s.cur_calls, cur_fails = s.cur_fails, leases = leases,
    fleet_start = s.fleet_start, prev_firsts = s.prev_firsts, cur_firsts = s.cur_firsts,
    prev_retries = s.prev_retries, cur_retries = s.cur_retries, prev_requests = s.prev_requests,
    cur_requests = s.cur_requests, prev_accepts = s.prev_accepts, cur_accepts = s.cur_accepts,
    reporters = s.reporters,
  }
end

-- transition moves to phase to at time at. A connection's first
-- transition takes at as its revision and each later one adds one, so a
-- connection that expired idle and comes back never repeats a revision of
-- its previous life.
local function transition(s, at, to, cause, actor, reason)
  if s.revision == 0 and at > 0 then s.revision = at else s.revision = s.revision + 1 end
  table.insert(events, {id = ID, at = at, from = s.phase, to = to, cause = cause, rev = s.revision,
    actor = actor or '', reason = reason or ''})
  s.phase, s.cause, s.changed_at, s.successes, s.failures = to, cause, at, 0, 0
  local f = {}
  for slot = 0, P.max_probes - 1 do
    f[2 * slot + 1], f[2 * slot + 2] = lease_fields(slot)
  end
  redis.call('HDEL', S, unpack(f))
  s.leases, s.lapsed = {}, {}
  if to ~= PHASE.OPEN then s.open_until = 0 end
end

-- emit records this call's transitions in the history and publishes them
-- with the state after the call, so watchers need no read of their own.
local function emit(s)
  local state = nil
  for _, ev in ipairs(events) do
    redis.call('LPUSH', H, cjson.encode(ev))
    redis.call('LTRIM', H, 0, HCAP - 1)
    state = state or state_table(s)
    ev.state = state
    redis.call('PUBLISH', CHAN, cjson.encode(ev))
    ev.state = nil
  end
  -- The history lives exactly as long as the state (save ran before the
  -- list existed on a connection's first event).
  if #events > 0 then keep(s) end
end

local function reset_counts(s)
  s.consecutive, s.window_start, s.prev_calls, s.prev_fails, s.cur_calls, s.cur_fails = 0, 0, 0, 0, 0, 0
  s.reporters = ''
end

-- The fleet rules (internal/breaker/fleet.go). fleet_at is the fleet
-- counts as of now, rotated without writing: the view a decision reads.
local function fleet_at(s)
  local w = P.fleet_window
  local start = now - now % w
  if s.fleet_start == start then
    return {start = start, pf = s.prev_firsts, cf = s.cur_firsts, pr = s.prev_retries, cr = s.cur_retries,
      pq = s.prev_requests, cq = s.cur_requests, pa = s.prev_accepts, ca = s.cur_accepts}
  end
  if s.fleet_start == start - w then
    return {start = start, pf = s.cur_firsts, cf = 0, pr = s.cur_retries, cr = 0, pq = s.cur_requests, cq = 0,
      pa = s.cur_accepts, ca = 0}
  end
  return {start = start, pf = 0, cf = 0, pr = 0, cr = 0, pq = 0, cq = 0, pa = 0, ca = 0}
end

-- throttle_prob is the adaptive throttle's rejection probability,
-- max(0, (requests - K*accepts) / (requests + 1)) in weighted units, in
-- the model's float operation order.
local function throttle_prob(s)
  if P.throttle_k <= 0 then return 0 end
  local f, w = fleet_at(s), P.fleet_window
  local e = now - f.start
  local rq = f.pq * (w - e) + f.cq * w
  local ac = f.pa * (w - e) + f.ca * w
  return math.max(0, (rq - P.throttle_k * ac) / (rq + w))
end

-- budget_allows says whether one more retry fits the retry budget, in
-- exact integers.
local function budget_allows(s)
  if P.budget_bp <= 0 then return true end
  local f, w = fleet_at(s), P.fleet_window
  local e = now - f.start
  local retries = f.pr * (w - e) + f.cr * w + w
  local firsts = f.pf * (w - e) + f.cf * w
  return retries * 10000 <= math.max(P.budget_min * w * w * 10, P.budget_bp * firsts)
end

-- count_fleet rotates the fleet counts into s and adds to the current
-- bucket.
local function count_fleet(s, firsts, retries, requests, accepts)
  local f = fleet_at(s)
  s.fleet_start, s.prev_firsts, s.prev_retries, s.prev_requests, s.prev_accepts = f.start, f.pf, f.pr, f.pq, f.pa
  s.cur_firsts = math.min(f.cf + firsts, MAX_COUNT)
  s.cur_retries = math.min(f.cr + retries, MAX_COUNT)
  s.cur_requests = math.min(f.cq + requests, MAX_COUNT)
  s.cur_accepts = math.min(f.ca + accepts, MAX_COUNT)
end

-- count_report counts a reported call for the rules that are on.
local function count_report(s, outcome, retry, n)
  local firsts = P.budget_bp > 0 and not retry
  local throttle = P.throttle_k > 0
  if outcome == OUTCOME.CANCELED or (not firsts and not throttle) then return end
  if outcome ~= OUTCOME.SUCCESS then n = 1 end
  local f, q, a = 0, 0, 0
  if firsts then f = n end
  if throttle then
    q = n
    if outcome == OUTCOME.SUCCESS or outcome == OUTCOME.CLIENT_ERROR then a = n end
  end
  count_fleet(s, f, 0, q, a)
end

local function reporter_list(s)
  local rs = {}
  for id, at in string.gmatch(s.reporters, '([^:,]*):(%d+)') do rs[#rs + 1] = {id = id, at = tonumber(at)} end
  return rs
end

local function failure_reporters(s)
  local n, cut = 0, now - P.fleet_window
  for _, r in ipairs(reporter_list(s)) do
    if r.at > cut then n = n + 1 end
  end
  return n
end

-- saw_failure records that reporter id saw an ambiguous failure now.
local function saw_failure(s, id)
  if P.quorum <= 1 then return end
  local cut, keep = now - P.fleet_window, {}
  for _, r in ipairs(reporter_list(s)) do
    if r.at > cut and r.id ~= id then keep[#keep + 1] = r end
  end
  keep[#keep + 1] = {id = id, at = now}
  local parts = {}
  for i = math.max(1, #keep - P.quorum + 1), #keep do
    parts[#parts + 1] = keep[i].id .. ':' .. string.format('%d', keep[i].at)
  end
  s.reporters = table.concat(parts, ',')
end

local function quorate(s) return P.quorum <= 1 or failure_reporters(s) >= P.quorum end

-- settle applies what time alone does, each timed transition stamped with
-- the instant it became due (lapsed leases were dropped by load).
local function settle(s)
  if s.override ~= OVERRIDE.NONE and s.override_until > 0 and now >= s.override_until then
    local forced, at = s.override, s.override_until
    s.override, s.override_until = OVERRIDE.NONE, 0
    if forced == OVERRIDE.FORCED_OPEN then
      transition(s, at, PHASE.HALF_OPEN, CAUSE.FORCE_EXPIRED)
    else
      reset_counts(s)
      transition(s, at, PHASE.CLOSED, CAUSE.FORCE_EXPIRED)
    end
  end
  if s.override == OVERRIDE.NONE and s.phase == PHASE.OPEN and now >= s.open_until then
    transition(s, s.open_until, PHASE.HALF_OPEN, CAUSE.OPEN_EXPIRED)
  end
end

-- due says whether settle would apply a timed transition now (without
-- applying it: a peek writes nothing).
local function due(s)
  if s.override ~= OVERRIDE.NONE then return s.override_until > 0 and now >= s.override_until end
  return s.phase == PHASE.OPEN and now >= s.open_until
end

local function find_lease(s, token)
  if token == '' then return nil end
  for _, l in ipairs(s.leases) do
    if l.token == token then return l end
  end
  return nil
end

local function release(s, l)
  redis.call('HDEL', S, lease_fields(l.slot))
  for i, x in ipairs(s.leases) do
    if x.slot == l.slot then table.remove(s.leases, i) break end
  end
end

-- may_create says whether a writing script may create the state: only
-- right after the store registered the connection in its tenant's index
-- (registered_at, Unix ms, within grace ms), so that no state exists
-- that the index, the cap and the sweeper do not know.
local function may_create(s, registered_at, grace)
  return s.exists or (registered_at > 0 and now <= registered_at + grace)
end

-- reply lists a named table's values in the order of names (the Go side
-- reads them in the same order), then this call's transitions: n, then
-- from, to, cause for each (the server counts them in its metrics).
local function reply(names, r)
  local out = {}
  for i, name in ipairs(names) do out[i] = r[name] end
  out[#out + 1] = #events
  for _, ev in ipairs(events) do
    out[#out + 1] = ev.from
    out[#out + 1] = ev.to
    out[#out + 1] = ev.cause
  end
  return out
end
