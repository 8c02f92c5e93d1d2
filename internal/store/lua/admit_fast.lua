-- admit's fast path, before the prelude runs. A candidate with no override
-- that is closed is allowed, and one that is open with its open period
-- still running is denied: internal/breaker's Admit has nothing to settle,
-- no lease to look at and nothing to write. The fleet rules keep a
-- candidate off this path when they could decide otherwise or would
-- count: a retry while the retry budget is on, a closed connection whose
-- throttle rejects with a probability above 0, an open one whose policy is
-- in shadow mode. Such candidates are decided here from one HMGET each, in
-- order, up to the first allowed one; when one on the way is anything else
-- (no state, an override, half-open, an open period that ended) the full
-- script decides them all. The reply is admit.lua's; the field names are
-- prelude.lua's HASH_FIELDS, the numbers its PHASE, CAUSE, DECISION and
-- REASON, the policy's first fields policyArg's (scripts.go).
do
  local CLOSED, OPEN, NO_OVERRIDE = 1, 2, 0
  local ALLOW, DENY = 1, 3
  local out, n = {now, 0}, 2
  local cands = #KEYS / 2
  for k = 1, cands do
    local base = 3 + 6 * (k - 1)
    local fw, budget, tk, shadow = string.match(ARGV[base], '^%d+,%d+,%d+,(%d+),(%d+),([^,]+),(%d),')
    if ARGV[base + 4] == '1' and budget ~= '0' then break end
    local throttle = tk ~= '0'
    local f
    if throttle then
      f = redis.call('HMGET', KEYS[2 * k - 1], 'ph', 'ov', 'rv', 'ou', 'ca', 'fs', 'fpq', 'fcq', 'fpa', 'fca')
    else
      f = redis.call('HMGET', KEYS[2 * k - 1], 'ph', 'ov', 'rv', 'ou', 'ca')
    end
    local phase, ou = tonumber(f[1]), tonumber(f[4]) or 0
    if tonumber(f[2]) ~= NO_OVERRIDE or not (phase == CLOSED or (phase == OPEN and now < ou)) then break end
    if phase == OPEN and shadow == '1' then break end
    if phase == CLOSED and throttle then
      -- prelude.lua's throttle_prob above 0, i.e. requests > K*accepts
      -- over the window: the full script draws.
      local w = tonumber(fw)
      local start, fs = now - now % w, tonumber(f[6]) or 0
      local pq, cq, pa, ca = 0, tonumber(f[8]) or 0, 0, tonumber(f[10]) or 0
      if fs == start then
        pq, pa = tonumber(f[7]) or 0, tonumber(f[9]) or 0
      elseif fs == start - w then
        pq, cq, pa, ca = cq, 0, ca, 0
      else
        cq, ca = 0, 0
      end
      local e = now - start
      if pq * (w - e) + cq * w - tonumber(tk) * (pa * (w - e) + ca * w) > 0 then break end
    end
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
    -- lease_expires, lease_expired, exists, wake, shadowed,
    -- shadow_retry_after, throttle, no events.
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] =
      decision, reason, retry, tonumber(f[3]) or 0, phase, ''
    out[n + 7], out[n + 8], out[n + 9], out[n + 10], out[n + 11], out[n + 12], out[n + 13], out[n + 14] =
      0, 0, 1, 0, 0, 0, '0', 0
    n = n + 14
    out[2] = k
    if decision == ALLOW or k == cands then return out end
  end
end
