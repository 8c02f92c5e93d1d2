-- prelude/phase.lua: moving between phases: a transition, its record in
-- the history and its event, and what time alone does (settle).

local function reset_counts(s)
  s.consecutive, s.window_start, s.prev_calls, s.prev_fails, s.cur_calls, s.cur_fails = 0, 0, 0, 0, 0, 0
  s.reporters = ''
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
    redis.call('LTRIM', H, 0, P.history - 1)
    state = state or state_table(s)
    ev.state = state
    redis.call('PUBLISH', CHAN, cjson.encode(ev))
    ev.state = nil
  end
  -- The history lives exactly as long as the state (save ran before the
  -- list existed on a connection's first event).
  if #events > 0 then keep(s) end
end

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

