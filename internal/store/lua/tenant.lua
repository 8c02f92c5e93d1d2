-- tenant.lua: one tenant's index and deadlines, in the tenant's own hash
-- tag (one Cluster slot; a connection script cannot write them).
--
-- KEYS[1] index (sorted set of ids, score 0, lexical order for pages),
--   KEYS[2] wake set (sorted set: id → when the sweeper must look at the
--   connection next, Unix ms). Every indexed connection has a wake entry.
-- ARGV[1] op, ARGV[2] now in Unix ms (0: Redis TIME), ARGV[3..] the op's.
-- Reply: {TENANT code, now}, but due's: {now, id...}. Each op says its own.
local IDX, WAKE = KEYS[1], KEYS[2]
local op = ARGV[1]
local now = tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- register id, cap, grace: index a connection before its state is
-- created, within the cap (0: none), in one step: two creates at cap-1
-- cannot both pass or both fail. Its wake entry is held at least grace
-- ahead, so that no sweep or prune forgets it before the create lands.
-- Returns {OK or AT_CAP, now}.
if op == 'register' then
  local id, cap, grace = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  if not redis.call('ZSCORE', IDX, id) then
    if cap > 0 and redis.call('ZCARD', IDX) >= cap then return {TENANT.AT_CAP, now} end
    redis.call('ZADD', IDX, 0, id)
  end
  local cur = tonumber(redis.call('ZSCORE', WAKE, id))
  if not cur or cur < now + grace then redis.call('ZADD', WAKE, now + grace, id) end
  return {TENANT.OK, now}
end

-- check id, cap: whether a connection may exist (it is indexed, or the
-- tenant is below its cap). Returns {OK or AT_CAP, now}.
if op == 'check' then
  local id, cap = ARGV[3], tonumber(ARGV[4])
  if cap <= 0 or redis.call('ZSCORE', IDX, id) or redis.call('ZCARD', IDX) < cap then return {TENANT.OK, now} end
  return {TENANT.AT_CAP, now}
end

-- wake id, at: the connection must be looked at by at (keeps an earlier
-- entry). An existing connection is always indexed (heals a lost insert).
if op == 'wake' then
  local id, at = ARGV[3], tonumber(ARGV[4])
  local cur = tonumber(redis.call('ZSCORE', WAKE, id))
  if not cur or at < cur then redis.call('ZADD', WAKE, at, id) end
  redis.call('ZADD', IDX, 'NX', 0, id)
  return {TENANT.OK, now}
end

-- resched id, at: the sweeper looked at an existing connection: next look
-- at at (0: no need, it never expires and has no deadline).
if op == 'resched' then
  local id, at = ARGV[3], tonumber(ARGV[4])
  if at > 0 then redis.call('ZADD', WAKE, at, id) else redis.call('ZREM', WAKE, id) end
  redis.call('ZADD', IDX, 'NX', 0, id)
  return {TENANT.OK, now}
end

-- forget id: the connection's state is gone: drop it, unless a register
-- holds its wake entry ahead of now (a create is on its way).
-- Returns {OK or KEPT, now}.
if op == 'forget' then
  local id = ARGV[3]
  local cur = tonumber(redis.call('ZSCORE', WAKE, id))
  if cur and cur > now then return {TENANT.KEPT, now} end
  redis.call('ZREM', WAKE, id)
  redis.call('ZREM', IDX, id)
  return {TENANT.OK, now}
end

-- due limit: up to limit ids whose wake time has come, earliest first.
-- Returns {now, id...}.
if op == 'due' then
  local ids = redis.call('ZRANGEBYSCORE', WAKE, '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
  local out = {now}
  for _, id in ipairs(ids) do out[#out + 1] = id end
  return out
end
return redis.error_reply('tenant: unknown op ' .. tostring(op))
