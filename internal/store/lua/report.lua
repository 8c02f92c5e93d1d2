-- report.lua: apply the outcome of one call to one connection (the full
-- script: report_fast.lua ran first and did not answer).
--
-- KEYS[1] the state hash, KEYS[2] the history list, KEYS[3] (optional) the
--   report's idempotency key (see report_fast.lua).
-- ARGV[1] now (head.lua), ARGV[2..4] the connection (prelude/bind.lua),
--   ARGV[5] revision the caller was admitted under, ARGV[6] lease token
--   ('' none), ARGV[7] outcome (OUTCOME), ARGV[8] retry_after ms, ARGV[9]
--   HTTP status, ARGV[10] error code, ARGV[11] label ('' keeps the stored
--   one), ARGV[12] jitter in millionths, ARGV[13] registered_at and
--   ARGV[14] grace (see may_create), ARGV[15] how many successes the report
--   stands for (a client's batch; 1 otherwise), ARGV[16] retry ('1': the
--   call was a retry on this connection), ARGV[17] the reporter (for the
--   trip quorum), ARGV[18] how long KEYS[3] remembers the reply, ms.
-- Reply: REPORT_REPLY (schema.lua), then the transitions; REUSED alone.
--   throttle is the throttle's rejection probability in effect after the
--   report (0 unless closed with no override), as a string.
bind(1, 2)
local s = load()
if not may_create(s, tonumber(ARGV[13]), tonumber(ARGV[14])) then
  return reply(REPORT_REPLY, {status = STATUS.UNREGISTERED, accepted = 0, changed = 0, created = 0, revision = 0,
    phase = s.phase, now = now, wake = 0, throttle = '0', written_at = 0})
end
local created = not s.exists
settle(s)
local rev, token, outcome = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local retry, jitter = tonumber(ARGV[8]), tonumber(ARGV[12]) / 1e6
local batch = math.max(tonumber(ARGV[15]) or 1, 1)
s.updated_at, s.last_status, s.last_outcome, s.last_error = now, tonumber(ARGV[9]), outcome, ARGV[10]
if ARGV[11] ~= '' then s.label = ARGV[11] end
local lease = find_lease(s, token)
-- A half-open connection's verdict belongs to its probes: only a live
-- lease carries it (a probe that gave up its lease keeps the revision but
-- not the verdict).
local accepted = lease ~= nil or (rev == s.revision and s.phase ~= PHASE.HALF_OPEN)
if lease then release(s, lease) end
count_report(s, outcome, ARGV[16] == '1', batch)
local before = #events

local function open_duration()
  local d = P.open_base
  local i = 1
  while i < s.reopens and d < P.open_max do d = d * 2; i = i + 1 end
  d = math.min(d, P.open_max)
  if P.jitter > 0 then d = d + math.floor(d * P.jitter * (2 * jitter - 1)) end
  return math.max(math.min(d, P.open_max), 1)
end

local function trip()
  s.reopens = math.min(s.reopens + 1, LIMIT.MAX_REOPENS)
  reset_counts(s)
  transition(s, now, PHASE.OPEN, CAUSE.BREAKER)
  s.open_until = now + open_duration()
end

local function rotate()
  local start = now - now % P.window
  if s.window_start == start then return end
  if s.window_start == start - P.window then
    s.prev_calls, s.prev_fails = s.cur_calls, s.cur_fails
  else
    s.prev_calls, s.prev_fails = 0, 0
  end
  s.window_start, s.cur_calls, s.cur_fails = start, 0, 0
end

local function count(failed, n)
  if P.rate_bp <= 0 then return end
  rotate()
  s.cur_calls = math.min(s.cur_calls + n, LIMIT.MAX_COUNT)
  if failed then s.cur_fails = math.min(s.cur_fails + 1, LIMIT.MAX_COUNT) end
end

local function rate_tripped()
  if P.rate_bp <= 0 then return false end
  local e = now - s.window_start
  local calls = s.prev_calls * (P.window - e) + s.cur_calls * P.window
  local fails = s.prev_fails * (P.window - e) + s.cur_fails * P.window
  return calls >= P.min_calls * P.window and fails * 10000 >= P.rate_bp * calls
end

if outcome ~= OUTCOME.CANCELED and s.override == OVERRIDE.NONE then
  if accepted then
    if outcome == OUTCOME.SUCCESS or outcome == OUTCOME.CLIENT_ERROR then
      if s.phase == PHASE.HALF_OPEN then
        s.reopens = 0
        reset_counts(s)
        transition(s, now, PHASE.CLOSED, CAUSE.PROBE_SUCCESS)
      elseif s.phase == PHASE.CLOSED and outcome == OUTCOME.SUCCESS then
        s.successes = math.min(s.successes + batch, LIMIT.MAX_COUNT)
        s.consecutive = 0
        count(false, batch)
      end
    elseif outcome == OUTCOME.TRANSIENT_FAILURE then
      if s.phase == PHASE.HALF_OPEN then
        trip()
      elseif s.phase == PHASE.CLOSED then
        s.failures = math.min(s.failures + 1, LIMIT.MAX_COUNT)
        s.consecutive = math.min(s.consecutive + 1, LIMIT.MAX_COUNT)
        count(true, 1)
        saw_failure(s, ARGV[17])
        if ((P.consecutive > 0 and s.consecutive >= P.consecutive) or rate_tripped()) and quorate(s) then trip() end
      end
    end
  end
  -- The hint applies whatever the revision, merged by max.
  local d, cause = retry, CAUSE.RATE_LIMIT
  if outcome == OUTCOME.RATE_LIMITED then
    if retry <= 0 then d = P.rate_limit_default end
  elseif outcome == OUTCOME.OVERLOADED then d, cause = math.max(retry, P.overload_floor), CAUSE.OVERLOAD
  elseif outcome == OUTCOME.QUOTA_EXHAUSTED then d, cause = math.max(retry, P.quota_block), CAUSE.QUOTA
  elseif outcome == OUTCOME.AUTH_FAILURE then d, cause = math.max(retry, P.auth_block), CAUSE.AUTH
  end
  if d > 0 and not (s.phase == PHASE.OPEN and s.open_until >= now + d) then
    transition(s, now, PHASE.OPEN, cause)
    s.open_until = now + d
  end
end
save(s)
emit(s)
local throttle = '0'
if s.phase == PHASE.CLOSED and s.override == OVERRIDE.NONE then throttle = string.format('%.17g', throttle_prob(s)) end
return remember(reply(REPORT_REPLY, {status = STATUS.APPLIED, accepted = accepted and 1 or 0,
  changed = (#events > before) and 1 or 0, created = created and 1 or 0, revision = s.revision, phase = s.phase,
  now = now, wake = wake(s), throttle = throttle, written_at = written_at(s)}))
