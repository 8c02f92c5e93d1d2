-- get: the state as of now, settled in memory only (nothing is written).
-- ARGV[19] history limit. Returns {exists, history json..., encoded state...}.
local s = load()
local exists = s.exists
settle(s)
local n = tonumber(ARGV[19])
local hist = {}
if n > 0 then hist = redis.call('LRANGE', H, 0, n - 1) end
local out = {exists and 1 or 0, #hist}
for _, h in ipairs(hist) do out[#out + 1] = h end
for _, x in ipairs(encode(s)) do out[#out + 1] = x end
return out
