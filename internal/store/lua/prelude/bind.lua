-- prelude/bind.lua: the connection a script works on. The prelude (the
-- files of lua/prelude, in scripts.go's order) runs after head.lua (the
-- clock), the fast path (admit and report) and schema.lua. It mirrors
-- internal/breaker (the reference model) line by line; a differential test
-- holds the two together. Keep them in step.
--
-- A script binds one connection at a time: KEYS[2k-1] its state hash,
-- KEYS[2k] its history list (one hash tag: one Cluster slot), and three
-- ARGV from base: the packed policy (policy_table in schema.lua), the event
-- channel, the connection id hex. ARGV[1] is now (head.lua).
--
-- Every timing decision is made from now and the expiries stored in the
-- state hash (open until, override until, each lease's expiry); key TTLs
-- only collect garbage.

-- The bound connection: its keys, policy (with the store's idle TTL and
-- history cap), event channel and id, and the transitions applied to it so
-- far.
local S, H, P, CHAN, ID
local events = {}

-- bind makes the k-th connection of KEYS, with its three ARGV from base,
-- the one the functions below work on. The policy is parsed here, only on
-- the paths that need it.
local function bind(k, base)
  S, H = KEYS[2 * k - 1], KEYS[2 * k]
  local v, i = {}, 0
  for x in string.gmatch(ARGV[base], '[^,]+') do
    i = i + 1
    v[i] = tonumber(x)
  end
  P = policy_table(v)
  CHAN, ID = ARGV[base + 1], ARGV[base + 2]
  events = {}
end
