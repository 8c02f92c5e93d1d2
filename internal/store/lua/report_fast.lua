-- report's fast path, before the prelude runs: a success with the current
-- revision and no lease or hint, on a closed connection with no override.
-- internal/breaker's Report then counts
-- it and moves nothing (no settle, no lease, no transition, no event), so
-- one HMGET reads what it changes and one HSET writes only the fields
-- whose value moves: the breaker's window and the fleet window's counts
-- (a first attempt while the retry budget is on, a request and an accept
-- while the throttle is). The keys' time to live is
-- refreshed only when due: when less than the idle TTL is left, to the
-- idle TTL and an eighth (EXPIRES_AT in prelude.lua), so a healthy
-- connection lives at least its idle TTL after its last report and its
-- expiry is rewritten at most once per eighth of it. Any other report goes
-- on to the full script. ARGV as report.lua's; the field names are
-- prelude.lua's HASH_FIELDS, the numbers its PHASE, OVERRIDE, OUTCOME,
-- STATUS and MAX_COUNT, the policy's first fields policyArg's.
--
-- A report with an idempotency key (KEYS[3]: the connection's
-- cd:{t:id}:r:<key>; ARGV[18] how long it is remembered, ms) is applied
-- once: a run that applies it remembers "<what it said>|<its reply>" under
-- the key, and a key that names a report already applied answers that
-- report's first reply, marked REPLAYED (prelude.lua's STATUS), counting
-- and writing nothing; a key remembered for a report that said something
-- else (outcome, revision, count, retry flag) answers REUSED alone. The
-- fast path looks the key up and remembers its reply in one command (SET
-- NX GET, before its own writes); the full script looks it up below,
-- before the prelude, and remembers at its end (remember). Without a key
-- each is one comparison.
local REPORT_KEY, REPORT_SAID = KEYS[3], nil
if REPORT_KEY then REPORT_SAID = ARGV[7] .. ':' .. ARGV[5] .. ':' .. ARGV[15] .. ':' .. ARGV[16] end

-- replay is the answer to a report whose key was seen: the first reply.
local function replay(seen)
  local said, first = string.match(seen, '^([^|]*)|(.*)$')
  if said ~= REPORT_SAID then return {4} end
  local out, i = {}, 0
  for x in string.gmatch(first, '[^,]+') do
    i = i + 1
    -- REPORT_REPLY's 9th value, the throttle, is a string.
    if i == 9 then out[i] = x else out[i] = tonumber(x) end
  end
  out[1] = 3
  return out
end

-- remembered is what the key holds for reply out.
local function remembered(out)
  local v = {}
  for i, x in ipairs(out) do
    if type(x) == 'number' then v[i] = string.format('%d', x) else v[i] = x end
  end
  return REPORT_SAID .. '|' .. table.concat(v, ',')
end

-- remember stores the full script's reply under the report's key (when it
-- has one) and returns it. Only a run that applied the report calls it
-- (not UNREGISTERED).
local function remember(out)
  if REPORT_KEY then redis.call('SET', REPORT_KEY, remembered(out), 'PX', ARGV[18]) end
  return out
end

do
local idle, rate_bp, window, fleet_window, budget_bp, throttle_k = string.match(ARGV[2],
  '^(%d+),(%d+),(%d+),(%d+),(%d+),([^,]+),')
if ARGV[7] == '1' and ARGV[6] == '' and tonumber(ARGV[8]) <= 0 then
  local CLOSED, NO_OVERRIDE, SUCCESS, APPLIED, MAX_COUNT = '1', '0', '1', 1, 100000
  local S = KEYS[1]
  -- prelude.lua's count_report: the fleet window counts a first attempt
  -- while the retry budget is on, a request and an accept while the
  -- throttle is.
  local firsts, throttle = budget_bp ~= '0' and ARGV[16] ~= '1', throttle_k ~= '0'
  local f
  if firsts or throttle then
    f = redis.call('HMGET', S, 'ph', 'ov', 'rv', 'sc', 'cf', 'ls', 'lo', 'le', 'lb', 'ws', 'wcc', 'xp', 'fs', 'fcf',
      'fpq', 'fcq', 'fpa', 'fca')
  else
    f = redis.call('HMGET', S, 'ph', 'ov', 'rv', 'sc', 'cf', 'ls', 'lo', 'le', 'lb', 'ws', 'wcc', 'xp')
  end
  if f[1] == CLOSED and f[2] == NO_OVERRIDE and f[3] == ARGV[5] then
    local batch = tonumber(ARGV[15]) or 1
    if batch < 1 then batch = 1 end
    local w, n = {'uat', string.format('%d', now)}, 2
    local sc = tonumber(f[4]) or 0
    if sc < MAX_COUNT then
      n = n + 2
      w[n - 1], w[n] = 'sc', string.format('%d', math.min(sc + batch, MAX_COUNT))
    end
    if f[5] ~= '0' then
      n = n + 2
      w[n - 1], w[n] = 'cf', '0'
    end
    if f[6] ~= ARGV[9] then
      n = n + 2
      w[n - 1], w[n] = 'ls', string.format('%d', tonumber(ARGV[9]))
    end
    if f[7] ~= SUCCESS then
      n = n + 2
      w[n - 1], w[n] = 'lo', SUCCESS
    end
    if (f[8] or '') ~= ARGV[10] then
      n = n + 2
      w[n - 1], w[n] = 'le', ARGV[10]
    end
    if ARGV[11] ~= '' and f[9] ~= ARGV[11] then
      n = n + 2
      w[n - 1], w[n] = 'lb', ARGV[11]
    end
    if rate_bp ~= '0' then
      -- count(false, batch): rotate the window (once per window, so its
      -- other fields are read only then), then count the calls.
      window = tonumber(window)
      local start = now - now % window
      local ws, cc = tonumber(f[10]) or 0, tonumber(f[11]) or 0
      if ws ~= start then
        local pc, pf = '0', '0'
        if ws == start - window then pc, pf = f[11] or '0', redis.call('HGET', S, 'wcf') or '0' end
        w[n + 1], w[n + 2], w[n + 3], w[n + 4], w[n + 5], w[n + 6], w[n + 7], w[n + 8] =
          'ws', string.format('%d', start), 'wpc', pc, 'wpf', pf, 'wcf', '0'
        n = n + 8
        cc = 0
      end
      if cc < MAX_COUNT then
        n = n + 2
        w[n - 1], w[n] = 'wcc', string.format('%d', math.min(cc + batch, MAX_COUNT))
      end
    end
    local prob = '0'
    if firsts or throttle then
      -- Rotate the fleet window first (its retries are read only then),
      -- then count.
      local fw = tonumber(fleet_window)
      local start = now - now % fw
      local fs = tonumber(f[13]) or 0
      local cf, pq, cq, pa, ca = tonumber(f[14]) or 0, tonumber(f[15]) or 0, tonumber(f[16]) or 0,
        tonumber(f[17]) or 0, tonumber(f[18]) or 0
      if fs ~= start then
        local pf, pr = 0, 0
        if fs == start - fw then
          pf, pr, pq, pa = cf, tonumber(redis.call('HGET', S, 'fcr')) or 0, cq, ca
        else
          pq, pa = 0, 0
        end
        cf, cq, ca = 0, 0, 0
        w[n + 1], w[n + 2], w[n + 3], w[n + 4], w[n + 5], w[n + 6], w[n + 7], w[n + 8] =
          'fs', string.format('%d', start), 'fpf', string.format('%d', pf), 'fpr', string.format('%d', pr),
          'fpq', string.format('%d', pq)
        w[n + 9], w[n + 10], w[n + 11], w[n + 12], w[n + 13], w[n + 14], w[n + 15], w[n + 16] =
          'fpa', string.format('%d', pa), 'fcr', '0', 'fcf', '0', 'fcq', '0'
        w[n + 17], w[n + 18] = 'fca', '0'
        n = n + 18
      end
      if firsts and cf < MAX_COUNT then
        cf = math.min(cf + batch, MAX_COUNT)
        n = n + 2
        w[n - 1], w[n] = 'fcf', string.format('%d', cf)
      end
      if throttle then
        if cq < MAX_COUNT then
          cq = math.min(cq + batch, MAX_COUNT)
          n = n + 2
          w[n - 1], w[n] = 'fcq', string.format('%d', cq)
        end
        if ca < MAX_COUNT then
          ca = math.min(ca + batch, MAX_COUNT)
          n = n + 2
          w[n - 1], w[n] = 'fca', string.format('%d', ca)
        end
        -- prelude.lua's throttle_prob, in its operation order.
        local e = now - start
        local rq, ac = pq * (fw - e) + cq * fw, pa * (fw - e) + ca * fw
        prob = string.format('%.17g', math.max(0, (rq - tonumber(throttle_k) * ac) / (rq + fw)))
      end
    end
    idle = tonumber(idle)
    local xp, ttl = tonumber(f[12]) or 0, nil
    if xp - now < idle then
      ttl = idle + math.floor(idle / 8)
      xp = now + ttl
      n = n + 2
      w[n - 1], w[n] = 'xp', string.format('%d', xp)
    end
    -- REPORT_REPLY of report.lua: status, accepted, changed, created,
    -- revision, phase, now, wake, throttle; no events.
    local out = {APPLIED, 1, 0, 0, tonumber(f[3]), tonumber(CLOSED), now, xp, prob, 0}
    if REPORT_KEY then
      -- Remembered unless already there (remembered(out), in one format);
      -- nothing is written before.
      local seen = redis.call('SET', REPORT_KEY, string.format('%s|1,1,0,0,%s,1,%d,%d,%s,0', REPORT_SAID, f[3], now, xp, prob),
        'NX', 'GET', 'PX', ARGV[18])
      if seen then return replay(seen) end
    end
    if ttl then
      redis.call('PEXPIRE', S, ttl)
      redis.call('PEXPIRE', KEYS[2], ttl)
    end
    redis.call('HSET', S, unpack(w))
    return out
  end
end
end

-- Not the fast path: a resend is answered before the full script runs.
if REPORT_KEY then
  local seen = redis.call('GET', REPORT_KEY)
  if seen then return replay(seen) end
end
