-- admit: the candidates in order; the first admitted wins and no
-- candidate after it is looked at, so no probe is granted past it.
-- KEYS: each candidate's state and history. ARGV[2] peek ('1': decide
-- only what needs no write, see below), then four ARGV per candidate from
-- ARGV[3]: policy, channel, id (see bind), nonce for a probe lease token.
-- It never creates a state: a healthy connection's Admit writes nothing.
--
-- A peek (the Cluster's pipelined round, one candidate per script, see
-- AdmitFirst) answers UNDECIDED instead of settling a due transition or
-- granting a probe, and otherwise what a full admit would: it writes
-- nothing, so a peek of a candidate that is not chosen leaves no trace.
local UNDECIDED = 0
local PEEK = ARGV[2] == '1'
-- Reply: now, how many candidates were decided, then for each ADMIT_REPLY
-- and its transitions (n, then from, to, cause for each).
local ADMIT_REPLY = {'decision', 'reason', 'retry_after', 'revision', 'phase', 'lease_token', 'lease_expires',
  'lease_expired', 'exists', 'wake'}
local out = {now, 0}

local function decide(s, nonce)
  local r = {decision = DECISION.ALLOW, reason = REASON.NONE, retry_after = 0, lease_token = '', lease_expires = 0,
    lease_expired = 0, exists = s.exists and 1 or 0}
  if s.override == OVERRIDE.FORCED_OPEN then
    r.decision, r.reason = DECISION.DENY, REASON.FORCED_OPEN
    if s.override_until > 0 then r.retry_after = s.override_until - now else r.retry_after = P.open_max end
  elseif s.override == OVERRIDE.FORCED_CLOSED or s.phase == PHASE.CLOSED then
    r.decision = DECISION.ALLOW
  elseif s.phase == PHASE.OPEN then
    r.decision, r.retry_after = DECISION.DENY, s.open_until - now
    local c = s.cause
    if c == CAUSE.RATE_LIMIT then r.reason = REASON.COOLDOWN
    elseif c == CAUSE.OVERLOAD then r.reason = REASON.OVERLOADED
    elseif c == CAUSE.QUOTA then r.reason = REASON.QUOTA
    elseif c == CAUSE.AUTH then r.reason = REASON.AUTH
    elseif c == CAUSE.FORCED then r.reason = REASON.FORCED_OPEN
    else r.reason = REASON.OPEN end
  elseif #s.leases >= P.max_probes then
    -- half-open, every slot held: wait for the first live lease to end
    -- (load kept only leases whose stored expiry is after now, so > 0).
    r.decision, r.reason = DECISION.DENY, REASON.PROBE_IN_FLIGHT
    r.retry_after = s.leases[1].expires - now
    for _, l in ipairs(s.leases) do r.retry_after = math.min(r.retry_after, l.expires - now) end
  elseif PEEK then
    r.decision = UNDECIDED
  else
    local slot = 0
    while true do
      local used = false
      for _, l in ipairs(s.leases) do if l.slot == slot then used = true end end
      if not used then break end
      slot = slot + 1
    end
    r.decision = DECISION.ALLOW_PROBE
    r.lease_token = string.format('%d.%d.%d.%s', s.revision, slot, now, nonce)
    r.lease_expires = now + P.lease_ttl
    -- A token still in the slot is a lease that lapsed unsettled: its
    -- holder died or hung.
    if s.lapsed[slot] then r.lease_expired = 1 end
    local tf, xf = lease_fields(slot)
    redis.call('HSET', S, tf, r.lease_token, xf, string.format('%d', r.lease_expires))
    table.insert(s.leases, {slot = slot, token = r.lease_token, granted = now, expires = r.lease_expires})
    if #events == 0 then keep(s) end
  end
  return r
end

for k = 1, #KEYS / 2 do
  local base = 3 + 4 * (k - 1)
  bind(k, base)
  local s = load()
  local r
  if PEEK and due(s) then
    r = {decision = UNDECIDED, reason = REASON.NONE, retry_after = 0, lease_token = '', lease_expires = 0,
      lease_expired = 0, exists = s.exists and 1 or 0}
  else
    settle(s)
    r = decide(s, ARGV[base + 3])
  end
  if #events > 0 then
    save(s)
    emit(s)
  end
  r.revision, r.phase, r.wake = s.revision, s.phase, 0
  if #events > 0 then r.wake = wake(s) end
  out[2] = k
  for _, name in ipairs(ADMIT_REPLY) do out[#out + 1] = r[name] end
  out[#out + 1] = #events
  for _, ev in ipairs(events) do
    out[#out + 1] = ev.from
    out[#out + 1] = ev.to
    out[#out + 1] = ev.cause
  end
  if r.decision ~= DECISION.DENY then break end
end
return out
