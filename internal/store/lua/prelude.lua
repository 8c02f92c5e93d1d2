-- cooldownd: shared prelude of every connection script. It mirrors
-- internal/breaker (the reference model) line by line; a differential test
-- holds the two together. Keep them in step.
--
-- KEYS[1] state hash, KEYS[2] history list, KEYS[3..] probe lease slots.
-- ARGV[1] now in Unix ms, or 0 to read Redis TIME (the one clock).
-- ARGV[2..14] policy (see policyArgs in scripts.go), ARGV[15] idle TTL ms,
-- ARGV[16] history cap, ARGV[17] event channel, ARGV[18] connection id hex,
-- ARGV[19..] the operation's own arguments.
local S, H = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local P = {
  cf = tonumber(ARGV[2]), bp = tonumber(ARGV[3]), mc = tonumber(ARGV[4]),
  win = tonumber(ARGV[5]), ob = tonumber(ARGV[6]), om = tonumber(ARGV[7]),
  jit = tonumber(ARGV[8]), rld = tonumber(ARGV[9]), olf = tonumber(ARGV[10]),
  qb = tonumber(ARGV[11]), ab = tonumber(ARGV[12]), mp = tonumber(ARGV[13]),
  ttl = tonumber(ARGV[14]),
}
local IDLE, HCAP, CHAN, ID = tonumber(ARGV[15]), tonumber(ARGV[16]), ARGV[17], ARGV[18]
local MAXCOUNT, MAXREOPENS = 100000, 64
local CLOSED, OPEN, HALF = 1, 2, 3

local F = {'ph','ca','rv','ou','ro','cf','ws','wpc','wpf','wcc','wcf','ov','ovu','sc','fc','ls','lo','le','cat','uat','lb'}
local NUM = {ph=1,ca=1,rv=1,ou=1,ro=1,cf=1,ws=1,wpc=1,wpf=1,wcc=1,wcf=1,ov=1,ovu=1,sc=1,fc=1,ls=1,lo=1,cat=1,uat=1}

local function load()
  local v = redis.call('HMGET', S, unpack(F))
  local s, exists = {}, false
  for i, f in ipairs(F) do
    local x = v[i]
    if x then exists = true end
    if NUM[f] then s[f] = tonumber(x) or 0 else s[f] = x or '' end
  end
  if s.ph == 0 then s.ph = CLOSED end
  s.leases = {}
  for i = 1, P.mp do
    local tok = redis.call('GET', KEYS[2 + i])
    -- A lease belongs to the revision that granted it (the token's first
    -- field). Every transition deletes the slots, so a key of another
    -- revision is debris (e.g. re-created by a late ExtendLease): it holds
    -- no probe and is overwritten by the next grant.
    local _, _, trev, granted = string.find(tok or '', '^(%d+)%.%d+%.(%d+)%.')
    if tok and tonumber(trev) == s.rv then
      local pttl = redis.call('PTTL', KEYS[2 + i])
      table.insert(s.leases, {slot = i - 1, token = tok, granted = tonumber(granted) or 0, expires = now + pttl})
    end
  end
  s.exists = exists
  return s
end

local function save(s)
  local args = {}
  for _, f in ipairs(F) do
    args[#args + 1] = f
    local x = s[f]
    if NUM[f] then x = string.format('%d', x) end
    args[#args + 1] = x
  end
  redis.call('HSET', S, unpack(args))
  -- An override without an end lasts until changed: its state never
  -- expires (denied callers write nothing that would refresh it).
  if s.ov ~= 0 and s.ovu == 0 then
    redis.call('PERSIST', S)
    redis.call('PERSIST', H)
    return
  end
  local ttl = IDLE
  if s.ph == OPEN and s.ou > now then ttl = ttl + (s.ou - now) end
  if s.ovu > now then ttl = math.max(ttl, IDLE + (s.ovu - now)) end
  redis.call('PEXPIRE', S, ttl)
  redis.call('PEXPIRE', H, ttl)
end

-- state as returned to Go (and published with events): see reply.state in
-- scripts.go.
local function encode(s)
  local out = {now, s.ph, s.ca, s.rv, s.ou, s.ro, s.cf, s.ov, s.ovu, s.sc, s.fc, s.ls, s.lo, s.le, s.cat, s.uat, s.lb,
    s.ws, s.wpc, s.wpf, s.wcc, s.wcf, #s.leases}
  for _, l in ipairs(s.leases) do
    out[#out + 1] = l.slot
    out[#out + 1] = l.token
    out[#out + 1] = l.expires
  end
  return out
end

local events = {}

local function transition(s, to, cause, actor, reason)
  s.rv = s.rv + 1
  local ev = {id = ID, at = now, from = s.ph, to = to, cause = cause, rev = s.rv, actor = actor or '', reason = reason or ''}
  s.ph, s.ca, s.cat, s.sc, s.fc = to, cause, now, 0, 0
  for i = 1, P.mp do
    redis.call('DEL', KEYS[2 + i])
    redis.call('HDEL', S, 'lt' .. (i - 1))
  end
  s.leases = {}
  if to ~= OPEN then s.ou = 0 end
  table.insert(events, ev)
end

-- emit records this call's transitions in the history and publishes them
-- with the state after the call, so watchers need no read of their own.
local function emit(s)
  local state = nil
  for _, ev in ipairs(events) do
    redis.call('LPUSH', H, cjson.encode(ev))
    redis.call('LTRIM', H, 0, HCAP - 1)
    state = state or encode(s)
    ev.state = state
    redis.call('PUBLISH', CHAN, cjson.encode(ev))
    ev.state = nil
  end
  -- The history lives exactly as long as the state (save ran before the
  -- list existed on a connection's first event).
  if #events > 0 then
    local ttl = redis.call('PTTL', S)
    if ttl > 0 then
      redis.call('PEXPIRE', H, ttl)
    elseif ttl == -1 then
      redis.call('PERSIST', H)
    end
  end
end

local function reset_counts(s)
  s.cf, s.ws, s.wpc, s.wpf, s.wcc, s.wcf = 0, 0, 0, 0, 0, 0
end

local function settle(s)
  -- expired leases are already gone: Redis expired their keys.
  if s.ov ~= 0 and s.ovu > 0 and now >= s.ovu then
    local forced = s.ov
    s.ov, s.ovu = 0, 0
    if forced == 1 then
      transition(s, HALF, 10)
    else
      reset_counts(s)
      transition(s, CLOSED, 10)
    end
  end
  if s.ov == 0 and s.ph == OPEN and now >= s.ou then
    transition(s, HALF, 9)
  end
end

local function find_lease(s, token)
  if token == '' then return nil end
  for _, l in ipairs(s.leases) do
    if l.token == token then return l end
  end
  return nil
end

-- with_events appends the transitions of this call: n, then from, to, cause
-- for each (the server counts them in its metrics).
local function with_events(out)
  out[#out + 1] = #events
  for _, ev in ipairs(events) do
    out[#out + 1] = ev.from
    out[#out + 1] = ev.to
    out[#out + 1] = ev.cause
  end
  return out
end
