-- admit: ARGV[19] nonce for a probe lease token.
-- Returns {decision, reason, retry_after_ms, revision, phase, lease_token, lease_expires, now, changed, expired, events...}.
local s = load()
settle(s)
local dec, reason, ra, tok, lexp, expired = 0, 0, 0, '', 0, 0
if s.ov == 1 then
  dec, reason = 3, 6
  if s.ovu > 0 then ra = s.ovu - now else ra = P.om end
elseif s.ov == 2 or s.ph == CLOSED then
  dec = 1
elseif s.ph == OPEN then
  dec, ra = 3, s.ou - now
  local c = s.ca
  if c == 2 then reason = 1 elseif c == 3 then reason = 7 elseif c == 4 then reason = 4
  elseif c == 5 then reason = 5 elseif c == 6 then reason = 6 else reason = 2 end
else
  if #s.leases >= P.mp then
    dec, reason = 3, 3
    ra = s.leases[1].expires - now
    for _, l in ipairs(s.leases) do ra = math.min(ra, l.expires - now) end
  else
    local slot = 0
    while true do
      local used = false
      for _, l in ipairs(s.leases) do if l.slot == slot then used = true end end
      if not used then break end
      slot = slot + 1
    end
    tok = string.format('%d.%d.%d.%s', s.rv, slot, now, ARGV[19])
    lexp = now + P.ttl
    -- the lease key is a github.com/bsm/redislock lock: value = token.
    redis.call('SET', KEYS[3 + slot], tok, 'PX', P.ttl)
    -- lt<slot> remembers the slot's unsettled grant: a grant that finds
    -- one there means that lease lapsed without a report (its holder died).
    local field = 'lt' .. slot
    if redis.call('HEXISTS', S, field) == 1 then expired = 1 end
    redis.call('HSET', S, field, tok)
    table.insert(s.leases, {slot = slot, token = tok, granted = now, expires = lexp})
    dec = 2
  end
end
local changed = #events > 0
if changed then
  save(s)
  emit(s)
end
return with_events({dec, reason, ra, s.rv, s.ph, tok, lexp, now, changed and 1 or 0, expired})
