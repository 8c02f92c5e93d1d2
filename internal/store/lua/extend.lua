-- extend: settles, then says whether ARGV[19] names a live lease.
-- Returns {slot or -1, now}. The store then refreshes the lock with redislock.
local s = load()
settle(s)
if #events > 0 then
  save(s)
  emit(s)
end
local l = find_lease(s, ARGV[19])
if l then return with_events({l.slot, now}) end
return with_events({-1, now})
