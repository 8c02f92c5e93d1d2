-- get.lua: the state as of now. A timed transition that is due (an open
-- or an override that ended) is applied, stamped with the instant it became
-- due, recorded and published, so every reader shows a revision that is in
-- the history and a changed_at that stays put. The store's sweeper runs
-- this script to apply them when nobody else looks.
--
-- KEYS[1] the state hash, KEYS[2] the history list.
-- ARGV[1] now (head.lua), ARGV[2..4] the connection (prelude/bind.lua),
--   ARGV[5] how many history entries to return.
-- Reply: GET_REPLY (schema.lua), then the transitions.
bind(1, 2)
local s = load()
settle(s)
if #events > 0 then
  save(s)
  emit(s)
end
local n = tonumber(ARGV[5])
local hist = {}
if n > 0 then hist = redis.call('LRANGE', H, 0, n - 1) end
local r = {exists = s.exists and 1 or 0, wake = 0, state = cjson.encode(state_table(s)), history = hist}
if s.exists then r.wake = wake(s) end
return reply(GET_REPLY, r)
