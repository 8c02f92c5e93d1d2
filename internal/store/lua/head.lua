-- head.lua: the head of every connection script, before its fast path
-- (admit and report), schema.lua and the prelude: the one clock. ARGV[1] is
-- now in Unix ms, or 0 to read Redis TIME.
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
