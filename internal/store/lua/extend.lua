-- extend.lua: move a live probe lease's expiry: one atomic
-- compare-and-extend. Settles first.
--
-- KEYS[1] the state hash, KEYS[2] the history list.
-- ARGV[1] now (head.lua), ARGV[2..4] the connection (prelude/bind.lua),
--   ARGV[5] lease token, ARGV[6] ttl ms (cut to P.lease_ttl_max).
-- Reply: EXTEND_REPLY (schema.lua), then the transitions; slot -1 when the
--   token names no live lease.
bind(1, 2)
local s = load()
settle(s)
local r = {slot = -1, expires = 0, now = now, wake = 0}
local l = find_lease(s, ARGV[5])
if l then
  -- The time to live asked for, cut to the policy's bound (internal/
  -- breaker's Policy.LeaseExtension; 0: no bound).
  local ttl = tonumber(ARGV[6])
  if P.lease_ttl_max > 0 then ttl = math.min(ttl, P.lease_ttl_max) end
  l.expires = now + ttl
  local _, xf = lease_fields(l.slot)
  redis.call('HSET', S, xf, string.format('%d', l.expires))
  r.slot, r.expires = l.slot, l.expires
end
if #events > 0 then
  save(s)
  emit(s)
  r.wake = wake(s)
elseif l then
  keep(s)
end
return reply(EXTEND_REPLY, r)
