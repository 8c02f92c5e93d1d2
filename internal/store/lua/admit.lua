-- admit.lua: the candidates in order; the first admitted wins and no
-- candidate after it is looked at, so no probe is granted past it. It never
-- creates a state: a healthy connection's Admit writes nothing. (The full
-- script: admit_fast.lua ran first and did not answer.)
--
-- KEYS[2k-1], KEYS[2k] candidate k's state hash and history list.
-- ARGV[1] now (head.lua), ARGV[2] peek ('1': decide only what needs no
--   write, see below), then six ARGV per candidate from ARGV[3]: policy,
--   channel, id (see prelude/bind.lua), the nonce of a probe lease token,
--   retry ('1': the call was already sent to this candidate), draw (the
--   throttle's uniform draw, in millionths).
-- Reply: ADMIT_REPLY (now, how many candidates were decided), then for
--   each decided candidate CANDIDATE_REPLY and its transitions (schema.lua).
--   throttle is the throttle's rejection probability in effect after the
--   decision (0 unless closed with no override), as a string.
--
-- A peek (the Cluster's pipelined round, one candidate per script, see
-- AdmitFirst) answers ADMIT.UNDECIDED instead of settling a due transition,
-- granting a probe or counting a call for the fleet rules, and otherwise
-- what a full admit would: it writes nothing, so a peek of a candidate that
-- is not chosen leaves no trace.
local PEEK = ARGV[2] == '1'
local out = {}
out[ADMIT_AT.now], out[ADMIT_AT.decided] = now, 0

-- fleet_rules denies a call the breaker admits when a fleet rule says so
-- (internal/breaker's fleetRules).
local function fleet_rules(s, r, retry, draw)
  if s.phase == PHASE.CLOSED and draw < throttle_prob(s) then
    r.decision, r.reason, r.retry_after = DECISION.DENY, REASON.THROTTLED, LIMIT.THROTTLE_RETRY_AFTER
  elseif retry and not budget_allows(s) then
    r.decision, r.reason, r.retry_after = DECISION.DENY, REASON.RETRY_BUDGET, P.fleet_window - now % P.fleet_window
  end
end

-- decide is internal/breaker's Admit; it returns the answer and whether it
-- changed a count (the state must then be saved).
local function decide(s, nonce, retry, draw)
  local r = {decision = DECISION.ALLOW, reason = REASON.NONE, retry_after = 0, lease_token = '', lease_expires = 0,
    lease_expired = 0, exists = s.exists and 1 or 0, shadowed = REASON.NONE, shadow_retry_after = 0}
  if s.override == OVERRIDE.FORCED_OPEN then
    r.decision, r.reason = DECISION.DENY, REASON.FORCED_OPEN
    if s.override_until > 0 then r.retry_after = s.override_until - now else r.retry_after = P.open_max end
    return r, false
  elseif s.override == OVERRIDE.FORCED_CLOSED then
    return r, false
  elseif s.phase == PHASE.CLOSED then
    fleet_rules(s, r, retry, draw)
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
  else
    r.decision = DECISION.ALLOW_PROBE
    fleet_rules(s, r, retry, draw)
    if r.decision == DECISION.ALLOW_PROBE then
      if PEEK then
        r.decision = ADMIT.UNDECIDED
        return r, false
      end
      local slot = 0
      while true do
        local used = false
        for _, l in ipairs(s.leases) do if l.slot == slot then used = true end end
        if not used then break end
        slot = slot + 1
      end
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
  end
  if r.decision == DECISION.DENY and P.shadow == 1 then
    r.shadowed, r.shadow_retry_after = r.reason, r.retry_after
    r.decision, r.reason, r.retry_after = DECISION.ALLOW, REASON.NONE, 0
  end
  -- An Admit never creates a state: one never reported nor forced counts
  -- nothing (internal/breaker's seen).
  local counts = nil
  if not (s.revision > 0 or s.updated_at > 0) then
    counts = nil
  elseif r.decision == DECISION.DENY and r.reason == REASON.THROTTLED then
    counts = {0, 0, 1, 0}
  elseif retry and r.decision ~= DECISION.DENY and P.budget_bp > 0 then
    counts = {0, 1, 0, 0}
  end
  if counts == nil then return r, false end
  if PEEK then
    r.decision = ADMIT.UNDECIDED
    return r, false
  end
  count_fleet(s, counts[1], counts[2], counts[3], counts[4])
  return r, true
end

for k = 1, #KEYS / 2 do
  local base = 3 + 6 * (k - 1)
  bind(k, base)
  local s = load()
  local r, counted
  if PEEK and due(s) then
    r = {decision = ADMIT.UNDECIDED, reason = REASON.NONE, retry_after = 0, lease_token = '', lease_expires = 0,
      lease_expired = 0, exists = s.exists and 1 or 0, shadowed = REASON.NONE, shadow_retry_after = 0}
  else
    settle(s)
    r, counted = decide(s, ARGV[base + 3], ARGV[base + 4] == '1', tonumber(ARGV[base + 5]) / 1e6)
  end
  if #events > 0 or counted then save(s) end
  if #events > 0 then emit(s) end
  r.revision, r.phase, r.wake, r.written_at = s.revision, s.phase, 0, written_at(s)
  if #events > 0 then r.wake = wake(s) end
  r.throttle = '0'
  if s.phase == PHASE.CLOSED and s.override == OVERRIDE.NONE then r.throttle = string.format('%.17g', throttle_prob(s)) end
  out[ADMIT_AT.decided] = k
  append_reply(out, CANDIDATE_REPLY, r)
  if r.decision ~= DECISION.DENY then break end
end
return out
