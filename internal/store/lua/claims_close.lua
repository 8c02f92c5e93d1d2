end

-- claims_close.lua: the end of claims_open.lua's script (see there).
local out = report_body()
-- A report refused as UNREGISTERED runs again once its connection is
-- registered (Store.create): the keys this run claimed are given back, so
-- that the next run claims and counts them.
if out[REPORT_AT.status] == STATUS.UNREGISTERED then
  for i, key in ipairs(CLAIM_KEYS) do
    if CLAIMED[i] == 1 then redis.call('DEL', key) end
  end
end
return {CLAIMED, out}
