-- extend: ARGV[5] lease token, ARGV[6] ttl ms. Settles, then, when the
-- token names a live lease, moves its expiry to now + ttl: one atomic
-- compare-and-extend.
local EXTEND_REPLY = {'slot', 'expires', 'now', 'wake'}
bind(1, 2)
local s = load()
settle(s)
local r = {slot = -1, expires = 0, now = now, wake = 0}
local l = find_lease(s, ARGV[5])
if l then
  l.expires = now + tonumber(ARGV[6])
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
