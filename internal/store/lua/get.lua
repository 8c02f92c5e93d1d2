-- get: the state as of now, ARGV[5] history limit. A timed transition
-- that is due (an open or an override that ended) is applied, stamped with
-- the instant it became due, recorded and published, so every reader shows
-- a revision that is in the history and a changed_at that stays put. The
-- store's sweeper runs this script to apply them when nobody else looks.
local GET_REPLY = {'exists', 'wake', 'state', 'history'}
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
