-- prelude/reply.lua: a script's reply.

-- append_reply appends a named table's values to out in the order of names
-- (one of schema.lua's *_REPLY: the Go side reads them by the same names),
-- then this call's transitions: n, then from, to, cause for each (the
-- server counts them in its metrics).
local function append_reply(out, names, r)
  local n = #out
  for i, name in ipairs(names) do out[n + i] = r[name] end
  n = n + #names + 1
  out[n] = #events
  for _, ev in ipairs(events) do
    out[n + 1], out[n + 2], out[n + 3] = ev.from, ev.to, ev.cause
    n = n + 3
  end
  return out
end

-- written_at is when the state an answer rests on was last moved (Unix ms,
-- the script's clock): its last transition, or a live probe lease's grant
-- when later. With Durability the store answers a call that wrote nothing
-- NOT_REPLICATED while that is recent: the write it read may not have
-- reached the replicas yet (durable.go's freshWrites).
local function written_at(s)
  local at = s.changed_at or 0
  for _, l in ipairs(s.leases) do
    if l.granted > at then at = l.granted end
  end
  return at
end

-- reply is a script's whole reply: append_reply to nothing.
local function reply(names, r) return append_reply({}, names, r) end
