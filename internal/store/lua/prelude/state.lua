-- prelude/state.lua: a connection's state hash: load, save, its keys' time
-- to live, and the state as sent to Go. The fields are schema.lua's
-- STATE_FIELDS, stored under HASH_FIELDS.

-- Lease slot n is two fields: its token and its expiry (Unix ms). A token
-- whose lease lapsed stays until the slot is granted again, which is how a
-- grant knows that the previous holder never reported.
local function lease_fields(slot) return FIELD.lease_token .. slot, FIELD.lease_expires .. slot end

local function load()
  -- One HMGET: the state's fields, when the keys expire, then each slot's
  -- token and expiry.
  local names = HASH_FIELDS
  names[NFIELDS + 1] = FIELD.expires_at
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
  local ttl = P.idle
  local d = deadline(s)
  if d > now then ttl = P.idle + (d - now) end
  for _, l in ipairs(s.leases) do ttl = math.max(ttl, l.expires - now) end
  return now + ttl
end

-- keep sets the state's and the history's time to live (see expiry) and
-- records it in the state (FIELD.expires_at) when it moved.
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
    redis.call('HSET', S, FIELD.expires_at, string.format('%d', e))
    s.xp = e
  end
end

-- save writes the fields that changed since load (and FIELD.expires_at) in
-- one HSET, then sets the keys' time to live. A field whose value is its
-- default (0, or '' for text; load reads a missing field as that) is not
-- stored: one that was is deleted (docs/keys.md, decision 0053). The phase
-- is always stored, so a saved state is never an empty hash.
local function save(s)
  local args, del, raw, n, d = {}, {}, s.raw or {}, 0, 0
  for i = 1, NFIELDS do
    local f = STATE_FIELDS[i]
    local x = s[f]
    if not TEXT_FIELDS[f] then x = string.format('%d', x) end
    if x ~= raw[i] then
      if (x == '0' or x == '') and f ~= 'phase' then
        if raw[i] then
          d = d + 1
          del[d] = HASH_FIELDS[i]
        end
        raw[i] = false
      else
        args[n + 1], args[n + 2] = HASH_FIELDS[i], x
        n = n + 2
        raw[i] = x
      end
    end
  end
  local e = expiry(s)
  if e ~= s.xp then
    args[n + 1], args[n + 2] = FIELD.expires_at, string.format('%d', e)
    n = n + 2
    s.xp = e
  end
  if n > 0 then redis.call('HSET', S, unpack(args)) end
  if d > 0 then redis.call('HDEL', S, unpack(del)) end
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
-- (stateJSON in scripts.go): STATE_FIELDS by name, now and the live leases,
-- encoded as JSON.
local function state_table(s)
  local t = {now = now}
  for _, f in ipairs(STATE_FIELDS) do t[f] = s[f] end
  if #s.leases > 0 then
    local leases = {}
    for i, l in ipairs(s.leases) do leases[i] = {slot = l.slot, token = l.token, expires = l.expires} end
    t.leases = leases
  end
  return t
end
