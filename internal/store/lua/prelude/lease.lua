-- prelude/lease.lua: probe leases, and whether a writing script may create
-- a connection's state.

local function find_lease(s, token)
  if token == '' then return nil end
  for _, l in ipairs(s.leases) do
    if l.token == token then return l end
  end
  return nil
end

local function release(s, l)
  redis.call('HDEL', S, lease_fields(l.slot))
  for i, x in ipairs(s.leases) do
    if x.slot == l.slot then table.remove(s.leases, i) break end
  end
end

-- may_create says whether a writing script may create the state: only
-- right after the store registered the connection in its tenant's index
-- (registered_at, Unix ms, within grace ms), so that no state exists
-- that the index, the cap and the sweeper do not know.
local function may_create(s, registered_at, grace)
  return s.exists or (registered_at > 0 and now <= registered_at + grace)
end

