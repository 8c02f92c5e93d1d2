-- report: ARGV[19] revision, ARGV[20] lease token, ARGV[21] outcome,
-- ARGV[22] retry_after ms, ARGV[23] http status, ARGV[24] error code,
-- ARGV[25] label ('' keeps the stored one), ARGV[26] jitter in millionths.
-- Returns {accepted, changed, created, revision, phase, now, events...}.
local s = load()
local created = not s.exists
settle(s)
local rev, token, outcome = tonumber(ARGV[19]), ARGV[20], tonumber(ARGV[21])
local retry, jitter = tonumber(ARGV[22]), tonumber(ARGV[26]) / 1e6
s.uat, s.ls, s.lo, s.le = now, tonumber(ARGV[23]), outcome, ARGV[24]
if ARGV[25] ~= '' then s.lb = ARGV[25] end
local lease = find_lease(s, token)
local accepted = lease ~= nil or rev == s.rv
if lease then
  redis.call('DEL', KEYS[3 + lease.slot])
  redis.call('HDEL', S, 'lt' .. lease.slot)
end
local before = #events

local function open_duration()
  local d = P.ob
  local i = 1
  while i < s.ro and d < P.om do d = d * 2; i = i + 1 end
  d = math.min(d, P.om)
  if P.jit > 0 then d = d + math.floor(d * P.jit * (2 * jitter - 1)) end
  return math.max(math.min(d, P.om), 1)
end

local function trip()
  s.ro = math.min(s.ro + 1, MAXREOPENS)
  reset_counts(s)
  transition(s, OPEN, 1)
  s.ou = now + open_duration()
end

local function rotate()
  local start = now - now % P.win
  if s.ws == start then return end
  if s.ws == start - P.win then
    s.wpc, s.wpf = s.wcc, s.wcf
  else
    s.wpc, s.wpf = 0, 0
  end
  s.ws, s.wcc, s.wcf = start, 0, 0
end

local function count(failed)
  if P.bp <= 0 then return end
  rotate()
  s.wcc = math.min(s.wcc + 1, MAXCOUNT)
  if failed then s.wcf = math.min(s.wcf + 1, MAXCOUNT) end
end

local function rate_tripped()
  if P.bp <= 0 then return false end
  local e = now - s.ws
  local callsW = s.wpc * (P.win - e) + s.wcc * P.win
  local failsW = s.wpf * (P.win - e) + s.wcf * P.win
  return callsW >= P.mc * P.win and failsW * 10000 >= P.bp * callsW
end

if outcome ~= 8 and s.ov == 0 then
  if accepted then
    if outcome == 1 or outcome == 7 then
      if s.ph == HALF then
        s.ro = 0
        reset_counts(s)
        transition(s, CLOSED, 8)
      elseif s.ph == CLOSED and outcome == 1 then
        s.sc = math.min(s.sc + 1, MAXCOUNT)
        s.cf = 0
        count(false)
      end
    elseif outcome == 2 then
      if s.ph == HALF then
        trip()
      elseif s.ph == CLOSED then
        s.fc = math.min(s.fc + 1, MAXCOUNT)
        s.cf = math.min(s.cf + 1, MAXCOUNT)
        count(true)
        if (P.cf > 0 and s.cf >= P.cf) or rate_tripped() then trip() end
      end
    end
  end
  local d, cause = retry, 2
  if outcome == 3 then
    if retry <= 0 then d = P.rld end
  elseif outcome == 4 then d, cause = math.max(retry, P.olf), 3
  elseif outcome == 5 then d, cause = math.max(retry, P.qb), 4
  elseif outcome == 6 then d, cause = math.max(retry, P.ab), 5
  end
  if d > 0 and not (s.ph == OPEN and s.ou >= now + d) then
    transition(s, OPEN, cause)
    s.ou = now + d
  end
end
save(s)
emit(s)
return with_events({accepted and 1 or 0, (#events > before) and 1 or 0, created and 1 or 0, s.rv, s.ph, now})
