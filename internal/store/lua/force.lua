-- force.lua: an operator's override.
--
-- KEYS[1] the state hash, KEYS[2] the history list.
-- ARGV[1] now (head.lua), ARGV[2..4] the connection (prelude/bind.lua),
--   ARGV[5] the operation (FORCE: CLEAR, OPEN, CLOSED, RESET), ARGV[6]
--   duration ms from now (0: until changed), ARGV[7] actor, ARGV[8]
--   reason, ARGV[9] registered_at and ARGV[10] grace (see may_create).
-- Reply: FORCE_REPLY (schema.lua), then the transitions.
--
-- Clearing when there is no override (after settling: an override that
-- ended by itself is gone) changes nothing: no transition, no revision, and
-- a connection that does not exist is not created.
bind(1, 2)
local s = load()
local o, d, actor, reason = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], ARGV[8]
if o == FORCE.CLEAR and not s.exists then
  return reply(FORCE_REPLY, {status = STATUS.APPLIED, exists = 0, wake = 0, state = cjson.encode(state_table(s))})
end
if not may_create(s, tonumber(ARGV[9]), tonumber(ARGV[10])) then
  return reply(FORCE_REPLY, {status = STATUS.UNREGISTERED, exists = 0, wake = 0, state = cjson.encode(state_table(s))})
end
settle(s)
if o == FORCE.CLEAR and s.override == OVERRIDE.NONE then
  -- Nothing to clear: only what settle applied is written, as get does.
  if #events > 0 then
    save(s)
    emit(s)
  end
  return reply(FORCE_REPLY, {status = STATUS.APPLIED, exists = 1, wake = wake(s), state = cjson.encode(state_table(s))})
end
local until_ms = 0
if d > 0 then until_ms = now + d end
if o == FORCE.RESET then
  s.override, s.override_until, s.reopens = OVERRIDE.NONE, 0, 0
  reset_counts(s)
  transition(s, now, PHASE.CLOSED, CAUSE.RESET, actor, reason)
else
  s.override, s.override_until = o, until_ms
  if o == FORCE.OPEN then
    transition(s, now, PHASE.OPEN, CAUSE.FORCED, actor, reason)
    s.open_until = until_ms
  elseif o == FORCE.CLOSED then
    reset_counts(s)
    transition(s, now, PHASE.CLOSED, CAUSE.FORCED, actor, reason)
  else
    s.override_until = 0
    reset_counts(s)
    transition(s, now, PHASE.CLOSED, CAUSE.OVERRIDE_CLEARED, actor, reason)
  end
end
save(s)
emit(s)
return reply(FORCE_REPLY, {status = STATUS.APPLIED, exists = 1, wake = wake(s), state = cjson.encode(state_table(s))})
