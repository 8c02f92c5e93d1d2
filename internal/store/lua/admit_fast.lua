-- admit_fast.lua: admit's fast path, before schema.lua and the prelude run
-- (it uses only schema.lua's constants, folded in at load). KEYS, ARGV and
-- the reply are admit.lua's.
--
-- A candidate with no override that is closed is allowed, and one that is
-- open with its open period still running is denied: internal/breaker's
-- Admit has nothing to settle, no lease to look at and nothing to write.
-- The fleet rules keep a candidate off this path when they could decide
-- otherwise or would count: a retry while the retry budget is on, a closed
-- connection whose throttle rejects with a probability above 0, an open one
-- whose policy is in shadow mode. Such candidates are decided here from one
-- HMGET each, in order, up to the first allowed one; when one on the way is
-- anything else (no state, an override, half-open, an open period that
-- ended) the full script decides them all.
do
  local out, n = {}, ADMIT_AT.decided
  out[ADMIT_AT.now], out[ADMIT_AT.decided] = now, 0
  local cands = #KEYS / 2
  for k = 1, cands do
    local base = 3 + 6 * (k - 1)
    -- POLICY_HEAD captures the policy's first values, named as in
    -- schema.lua's policy_table, in its order (a test holds the names).
    local _, _, _, fleet_window, budget_bp, throttle_k, shadow = string.match(ARGV[base], POLICY_HEAD)
    if ARGV[base + 4] == '1' and budget_bp ~= '0' then break end
    local throttle = throttle_k ~= '0'
    local phase, ov, rv, ou, cause, cat, fs, fpq, fcq, fpa, fca
    if throttle then
      phase, ov, rv, ou, cause, cat, fs, fpq, fcq, fpa, fca = unpack(redis.call('HMGET', KEYS[2 * k - 1], FIELD.phase,
        FIELD.override, FIELD.revision, FIELD.open_until, FIELD.cause, FIELD.changed_at, FIELD.fleet_start,
        FIELD.prev_requests, FIELD.cur_requests, FIELD.prev_accepts, FIELD.cur_accepts))
    else
      phase, ov, rv, ou, cause, cat = unpack(redis.call('HMGET', KEYS[2 * k - 1], FIELD.phase, FIELD.override,
        FIELD.revision, FIELD.open_until, FIELD.cause, FIELD.changed_at))
    end
    phase, ou = tonumber(phase), tonumber(ou) or 0
    if (tonumber(ov) or 0) ~= OVERRIDE.NONE or not (phase == PHASE.CLOSED or (phase == PHASE.OPEN and now < ou)) then break end
    if phase == PHASE.OPEN and shadow == '1' then break end
    if phase == PHASE.CLOSED and throttle then
      -- prelude/fleet.lua's throttle_prob above 0, i.e. requests >
      -- K*accepts over the window: the full script draws.
      local w = tonumber(fleet_window)
      local start = now - now % w
      fs = tonumber(fs) or 0
      local pq, cq, pa, ca = 0, tonumber(fcq) or 0, 0, tonumber(fca) or 0
      if fs == start then
        pq, pa = tonumber(fpq) or 0, tonumber(fpa) or 0
      elseif fs == start - w then
        pq, cq, pa, ca = cq, 0, ca, 0
      else
        cq, ca = 0, 0
      end
      local e = now - start
      if pq * (w - e) + cq * w - tonumber(throttle_k) * (pa * (w - e) + ca * w) > 0 then break end
    end
    local decision, reason, retry = DECISION.ALLOW, REASON.NONE, 0
    if phase == PHASE.OPEN then
      -- The cause's reason, as admit.lua's decide.
      local c = tonumber(cause)
      decision, retry, reason = DECISION.DENY, ou - now, REASON.OPEN
      if c == CAUSE.RATE_LIMIT then reason = REASON.COOLDOWN
      elseif c == CAUSE.OVERLOAD then reason = REASON.OVERLOADED
      elseif c == CAUSE.QUOTA then reason = REASON.QUOTA
      elseif c == CAUSE.AUTH then reason = REASON.AUTH
      elseif c == CAUSE.FORCED then reason = REASON.FORCED_OPEN end
    end
    -- CANDIDATE_REPLY, with no events.
    out[n + CANDIDATE_AT.decision], out[n + CANDIDATE_AT.reason], out[n + CANDIDATE_AT.retry_after] =
      decision, reason, retry
    out[n + CANDIDATE_AT.revision], out[n + CANDIDATE_AT.phase] = tonumber(rv) or 0, phase
    out[n + CANDIDATE_AT.lease_token], out[n + CANDIDATE_AT.lease_expires] = '', 0
    out[n + CANDIDATE_AT.lease_expired], out[n + CANDIDATE_AT.exists], out[n + CANDIDATE_AT.wake] = 0, 1, 0
    out[n + CANDIDATE_AT.shadowed], out[n + CANDIDATE_AT.shadow_retry_after] = REASON.NONE, 0
    out[n + CANDIDATE_AT.throttle], out[n + CANDIDATE_AT.events] = '0', 0
    -- No lease on this path: the last write the verdict rests on is the
    -- last transition.
    out[n + CANDIDATE_AT.written_at] = tonumber(cat) or 0
    n = n + CANDIDATE_AT.events
    out[ADMIT_AT.decided] = k
    if decision == DECISION.ALLOW or k == cands then return out end
  end
end
