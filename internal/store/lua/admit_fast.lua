-- admit's fast path, before the prelude runs. A candidate with no override
-- that is closed is allowed, and one that is open with its open period
-- still running is denied, whatever the policy says: internal/breaker's
-- Admit has nothing to settle, no lease to look at and nothing to write.
-- Such candidates are decided here from one HMGET each, in order, up to
-- the first allowed one; when one on the way is anything else (no state,
-- an override, half-open, an open period that ended) the full script
-- decides them all. The reply is admit.lua's; the field names are
-- prelude.lua's HASH_FIELDS, the numbers its PHASE, CAUSE, DECISION and
-- REASON.
do
  local CLOSED, OPEN, NO_OVERRIDE = 1, 2, 0
  local ALLOW, DENY = 1, 3
  local out, n = {now, 0}, 2
  local cands = #KEYS / 2
  for k = 1, cands do
    local f = redis.call('HMGET', KEYS[2 * k - 1], 'ph', 'ov', 'rv', 'ou', 'ca')
    local phase, ou = tonumber(f[1]), tonumber(f[4]) or 0
    if tonumber(f[2]) ~= NO_OVERRIDE or not (phase == CLOSED or (phase == OPEN and now < ou)) then break end
    local decision, reason, retry = ALLOW, 0, 0
    if phase == OPEN then
      -- prelude.lua's CAUSE → REASON, as admit.lua.
      local c = tonumber(f[5])
      decision, retry, reason = DENY, ou - now, 2
      if c == 2 then reason = 1
      elseif c == 3 then reason = 7
      elseif c == 4 or c == 5 or c == 6 then reason = c end
    end
    -- decision, reason, retry_after, revision, phase, lease_token,
    -- lease_expires, lease_expired, exists, wake, no events.
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] =
      decision, reason, retry, tonumber(f[3]) or 0, phase, ''
    out[n + 7], out[n + 8], out[n + 9], out[n + 10], out[n + 11] = 0, 0, 1, 0, 0
    n = n + 11
    out[2] = k
    if decision == ALLOW or k == cands then return out end
  end
end
