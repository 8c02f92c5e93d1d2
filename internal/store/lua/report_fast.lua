-- report_fast.lua: report's fast path, before schema.lua and the prelude
-- run (it uses only schema.lua's constants, folded in at load). KEYS, ARGV
-- and the reply are report.lua's.
--
-- A success with the current revision and no lease or hint, on a closed
-- connection with no override: internal/breaker's Report then counts it and
-- moves nothing (no settle, no lease, no transition, no event), so one
-- HMGET reads what it changes and one HSET writes only the fields whose
-- value moves: the breaker's window and the fleet window's counts (a first
-- attempt while the retry budget is on, a request and an accept while the
-- throttle is). The keys' time to live is refreshed only when due: when
-- less than the idle TTL is left, to the idle TTL and an eighth
-- (FIELD.expires_at), so a healthy connection lives at least its idle TTL
-- after its last report and its expiry is rewritten at most once per eighth
-- of it. Any other report goes on to the full script.
--
-- A report with an idempotency key (KEYS[3]: the connection's
-- cd:{t:id}:r:<key>; ARGV[18] how long it is remembered, ms) is applied
-- once: a run that applies it remembers "<what it said>|<its reply>" under
-- the key, and a key that names a report already applied answers that
-- report's first reply, marked STATUS.REPLAYED, counting and writing
-- nothing; a key remembered for a report that said something else
-- (outcome, revision, count, retry flag) answers STATUS.REUSED alone. The
-- fast path looks the key up and remembers its reply in one command (SET
-- NX GET, before its own writes); the full script looks it up below,
-- before the prelude, and remembers at its end (remember). Without a key
-- each is one comparison.
local REPORT_KEY, REPORT_SAID = KEYS[3], nil
if REPORT_KEY then REPORT_SAID = ARGV[7] .. ':' .. ARGV[5] .. ':' .. ARGV[15] .. ':' .. ARGV[16] end

-- replay is the answer to a report whose key was seen: the first reply.
local function replay(seen)
  local said, first = string.match(seen, '^([^|]*)|(.*)$')
  if said ~= REPORT_SAID then return {STATUS.REUSED} end
  local out, i = {}, 0
  for x in string.gmatch(first, '[^,]+') do
    i = i + 1
    -- REPORT_REPLY's throttle is a string.
    if i == REPORT_AT.throttle then out[i] = x else out[i] = tonumber(x) end
  end
  -- A reply remembered before written_at existed has one field less:
  -- its length past REPORT_REPLY's fields and the events' count is then
  -- not a multiple of an event's 3 values.
  if (i - #REPORT_REPLY - 1) % 3 ~= 0 then table.insert(out, REPORT_AT.written_at, 0) end
  out[REPORT_AT.status] = STATUS.REPLAYED
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
-- POLICY_HEAD captures the policy's first values, named as in schema.lua's
-- policy_table, in its order (a test holds the names).
local idle, rate_bp, window, fleet_window, budget_bp, throttle_k = string.match(ARGV[2], POLICY_HEAD)
if ARGV[7] == '1' and ARGV[6] == '' and tonumber(ARGV[8]) <= 0 then
  local S = KEYS[1]
  -- prelude/fleet.lua's count_report: the fleet window counts a first
  -- attempt while the retry budget is on, a request and an accept while the
  -- throttle is.
  local firsts, throttle = budget_bp ~= '0' and ARGV[16] ~= '1', throttle_k ~= '0'
  local fleet = firsts or throttle
  -- A field at its default (0, '') is not stored (prelude/state.lua's
  -- save): a missing one reads as false here. The fleet counts are read
  -- only for the rules that are on; the others' current counts only when
  -- the window rotates.
  local phase, override, revision, successes, consecutive, last_status, last_outcome, last_error, label,
    window_start, cur_calls, expires_at, changed_at, fleet_start, cur_firsts, prev_requests, cur_requests, prev_accepts,
    cur_accepts
  if throttle then
    phase, override, revision, successes, consecutive, last_status, last_outcome, last_error, label,
      window_start, cur_calls, expires_at, changed_at, fleet_start, cur_firsts, prev_requests, cur_requests, prev_accepts,
      cur_accepts = unpack(redis.call('HMGET', S, FIELD.phase, FIELD.override, FIELD.revision, FIELD.successes,
        FIELD.consecutive, FIELD.last_status, FIELD.last_outcome, FIELD.last_error, FIELD.label,
        FIELD.window_start, FIELD.cur_calls, FIELD.expires_at, FIELD.changed_at, FIELD.fleet_start, FIELD.cur_firsts,
        FIELD.prev_requests, FIELD.cur_requests, FIELD.prev_accepts, FIELD.cur_accepts))
  elseif fleet then
    phase, override, revision, successes, consecutive, last_status, last_outcome, last_error, label,
      window_start, cur_calls, expires_at, changed_at, fleet_start, cur_firsts = unpack(redis.call('HMGET', S, FIELD.phase,
        FIELD.override, FIELD.revision, FIELD.successes, FIELD.consecutive, FIELD.last_status,
        FIELD.last_outcome, FIELD.last_error, FIELD.label, FIELD.window_start, FIELD.cur_calls,
        FIELD.expires_at, FIELD.changed_at, FIELD.fleet_start, FIELD.cur_firsts))
  else
    phase, override, revision, successes, consecutive, last_status, last_outcome, last_error, label,
      window_start, cur_calls, expires_at, changed_at = unpack(redis.call('HMGET', S, FIELD.phase, FIELD.override,
        FIELD.revision, FIELD.successes, FIELD.consecutive, FIELD.last_status, FIELD.last_outcome,
        FIELD.last_error, FIELD.label, FIELD.window_start, FIELD.cur_calls, FIELD.expires_at, FIELD.changed_at))
  end
  revision = revision or '0'
  -- The stored strings are compared as strings: a phase of '1' is closed.
  if phase == '' .. PHASE.CLOSED and (override or '0') == '' .. OVERRIDE.NONE and revision == ARGV[5] then
    local batch = tonumber(ARGV[15]) or 1
    if batch < 1 then batch = 1 end
    -- w is the HSET's field, value pairs, d the fields that go back to
    -- their default (HDEL).
    local w, n, d, nd = {FIELD.updated_at, string.format('%d', now)}, 2, {}, 0
    local sc = tonumber(successes) or 0
    if sc < LIMIT.MAX_COUNT then
      n = n + 2
      w[n - 1], w[n] = FIELD.successes, string.format('%d', math.min(sc + batch, LIMIT.MAX_COUNT))
    end
    if consecutive then
      nd = nd + 1
      d[nd] = FIELD.consecutive
    end
    local ls = string.format('%d', tonumber(ARGV[9]))
    if ls == '0' then
      if last_status then
        nd = nd + 1
        d[nd] = FIELD.last_status
      end
    elseif last_status ~= ls then
      n = n + 2
      w[n - 1], w[n] = FIELD.last_status, ls
    end
    if last_outcome ~= '' .. OUTCOME.SUCCESS then
      n = n + 2
      w[n - 1], w[n] = FIELD.last_outcome, '' .. OUTCOME.SUCCESS
    end
    if ARGV[10] == '' then
      if last_error then
        nd = nd + 1
        d[nd] = FIELD.last_error
      end
    elseif last_error ~= ARGV[10] then
      n = n + 2
      w[n - 1], w[n] = FIELD.last_error, ARGV[10]
    end
    if ARGV[11] ~= '' and label ~= ARGV[11] then
      n = n + 2
      w[n - 1], w[n] = FIELD.label, ARGV[11]
    end
    if rate_bp ~= '0' then
      -- count(false, batch): rotate the window (once per window, so its
      -- other fields are read only then), then count the calls.
      window = tonumber(window)
      local start = now - now % window
      local ws, cc = tonumber(window_start) or 0, tonumber(cur_calls) or 0
      if ws ~= start then
        n = n + 2
        w[n - 1], w[n] = FIELD.window_start, string.format('%d', start)
        local pc, pf = false, false
        if ws == start - window then pc, pf = cur_calls, redis.call('HGET', S, FIELD.cur_fails) end
        -- The previous window's counts, each set or deleted at 0; the
        -- current failures start at 0 (deleted).
        local rot = {FIELD.prev_calls, pc, FIELD.prev_fails, pf}
        for i = 1, 3, 2 do
          local x = rot[i + 1]
          if x and x ~= '0' then
            n = n + 2
            w[n - 1], w[n] = rot[i], x
          else
            nd = nd + 1
            d[nd] = rot[i]
          end
        end
        nd = nd + 1
        d[nd] = FIELD.cur_fails
        cc = 0
      end
      if cc < LIMIT.MAX_COUNT then
        n = n + 2
        w[n - 1], w[n] = FIELD.cur_calls, string.format('%d', math.min(cc + batch, LIMIT.MAX_COUNT))
      end
    end
    local prob = '0'
    if fleet then
      -- Rotate the fleet window first (the counts of the rules that are off
      -- and the retries are read only then), then count.
      local fw = tonumber(fleet_window)
      local start = now - now % fw
      local fs = tonumber(fleet_start) or 0
      local cf, pq, cq, pa, ca = tonumber(cur_firsts) or 0, tonumber(prev_requests) or 0,
        tonumber(cur_requests) or 0, tonumber(prev_accepts) or 0, tonumber(cur_accepts) or 0
      if fs ~= start then
        local pf, pr = 0, 0
        if fs == start - fw then
          local fcr, fcq, fca = unpack(redis.call('HMGET', S, FIELD.cur_retries, FIELD.cur_requests,
            FIELD.cur_accepts))
          if not throttle then cq, ca = tonumber(fcq) or 0, tonumber(fca) or 0 end
          pf, pr, pq, pa = cf, tonumber(fcr) or 0, cq, ca
        else
          pq, pa = 0, 0
        end
        cf, cq, ca = 0, 0, 0
        -- The fleet window's fields as they are after the rotation: each
        -- set, or deleted at 0 (a current count counted below is set).
        local rot = {FIELD.fleet_start, start, FIELD.prev_firsts, pf, FIELD.prev_retries, pr,
          FIELD.prev_requests, pq, FIELD.prev_accepts, pa}
        for i = 1, 10, 2 do
          if rot[i + 1] == 0 then
            nd = nd + 1
            d[nd] = rot[i]
          else
            n = n + 2
            w[n - 1], w[n] = rot[i], string.format('%d', rot[i + 1])
          end
        end
        d[nd + 1], nd = FIELD.cur_retries, nd + 1
        if not firsts then d[nd + 1], nd = FIELD.cur_firsts, nd + 1 end
        if not throttle then
          d[nd + 1], d[nd + 2], nd = FIELD.cur_requests, FIELD.cur_accepts, nd + 2
        end
      end
      if firsts and cf < LIMIT.MAX_COUNT then
        cf = math.min(cf + batch, LIMIT.MAX_COUNT)
        n = n + 2
        w[n - 1], w[n] = FIELD.cur_firsts, string.format('%d', cf)
      end
      if throttle then
        if cq < LIMIT.MAX_COUNT then
          cq = math.min(cq + batch, LIMIT.MAX_COUNT)
          n = n + 2
          w[n - 1], w[n] = FIELD.cur_requests, string.format('%d', cq)
        end
        if ca < LIMIT.MAX_COUNT then
          ca = math.min(ca + batch, LIMIT.MAX_COUNT)
          n = n + 2
          w[n - 1], w[n] = FIELD.cur_accepts, string.format('%d', ca)
        end
        -- prelude/fleet.lua's throttle_prob, in its operation order.
        local e = now - start
        local rq, ac = pq * (fw - e) + cq * fw, pa * (fw - e) + ca * fw
        prob = string.format('%.17g', math.max(0, (rq - tonumber(throttle_k) * ac) / (rq + fw)))
      end
    end
    idle = tonumber(idle)
    local xp, ttl = tonumber(expires_at) or 0, nil
    if xp - now < idle then
      ttl = idle + math.floor(idle / 8)
      xp = now + ttl
      n = n + 2
      w[n - 1], w[n] = FIELD.expires_at, string.format('%d', xp)
    end
    -- REPORT_REPLY, no events.
    local out = {}
    out[REPORT_AT.status], out[REPORT_AT.accepted], out[REPORT_AT.changed], out[REPORT_AT.created] =
      STATUS.APPLIED, 1, 0, 0
    out[REPORT_AT.revision], out[REPORT_AT.phase], out[REPORT_AT.now], out[REPORT_AT.wake] =
      tonumber(revision), PHASE.CLOSED, now, xp
    out[REPORT_AT.throttle], out[REPORT_AT.events] = prob, 0
    -- No lease and no transition here: the last write this answer rests on
    -- is the last transition.
    out[REPORT_AT.written_at] = tonumber(changed_at) or 0
    if REPORT_KEY then
      -- Remembered unless already there (what remembered(out) writes, in
      -- one format); nothing is written before.
      local seen = redis.call('SET', REPORT_KEY, string.format(REMEMBER_FORMAT, REPORT_SAID, unpack(out)),
        'NX', 'GET', 'PX', ARGV[18])
      if seen then return replay(seen) end
    end
    if ttl then
      redis.call('PEXPIRE', S, ttl)
      redis.call('PEXPIRE', KEYS[2], ttl)
    end
    -- The HSET first: the phase stays, so the hash is never left empty.
    redis.call('HSET', S, unpack(w))
    if nd > 0 then redis.call('HDEL', S, unpack(d)) end
    return out
  end
end
end

-- Not the fast path: a resend is answered before the full script runs.
if REPORT_KEY then
  local seen = redis.call('GET', REPORT_KEY)
  if seen then return replay(seen) end
end
