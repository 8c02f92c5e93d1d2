-- prelude/fleet.lua: the fleet rules (internal/breaker/fleet.go): the
-- fleet window's counts, the adaptive throttle, the retry budget and the
-- trip quorum's reporters.

-- fleet_at is the fleet
-- counts as of now, rotated without writing: the view a decision reads.
local function fleet_at(s)
  local w = P.fleet_window
  local start = now - now % w
  if s.fleet_start == start then
    return {start = start, pf = s.prev_firsts, cf = s.cur_firsts, pr = s.prev_retries, cr = s.cur_retries,
      pq = s.prev_requests, cq = s.cur_requests, pa = s.prev_accepts, ca = s.cur_accepts}
  end
  if s.fleet_start == start - w then
    return {start = start, pf = s.cur_firsts, cf = 0, pr = s.cur_retries, cr = 0, pq = s.cur_requests, cq = 0,
      pa = s.cur_accepts, ca = 0}
  end
  return {start = start, pf = 0, cf = 0, pr = 0, cr = 0, pq = 0, cq = 0, pa = 0, ca = 0}
end

-- throttle_prob is the adaptive throttle's rejection probability,
-- max(0, (requests - K*accepts) / (requests + 1)) in weighted units, in
-- the model's float operation order.
local function throttle_prob(s)
  if P.throttle_k <= 0 then return 0 end
  local f, w = fleet_at(s), P.fleet_window
  local e = now - f.start
  local rq = f.pq * (w - e) + f.cq * w
  local ac = f.pa * (w - e) + f.ca * w
  return math.max(0, (rq - P.throttle_k * ac) / (rq + w))
end

-- budget_allows says whether one more retry fits the retry budget, in
-- exact integers.
local function budget_allows(s)
  if P.budget_bp <= 0 then return true end
  local f, w = fleet_at(s), P.fleet_window
  local e = now - f.start
  local retries = f.pr * (w - e) + f.cr * w + w
  local firsts = f.pf * (w - e) + f.cf * w
  return retries * 10000 <= math.max(P.budget_min * w * w * 10, P.budget_bp * firsts)
end

-- count_fleet rotates the fleet counts into s and adds to the current
-- bucket.
local function count_fleet(s, firsts, retries, requests, accepts)
  local f = fleet_at(s)
  s.fleet_start, s.prev_firsts, s.prev_retries, s.prev_requests, s.prev_accepts = f.start, f.pf, f.pr, f.pq, f.pa
  s.cur_firsts = math.min(f.cf + firsts, LIMIT.MAX_COUNT)
  s.cur_retries = math.min(f.cr + retries, LIMIT.MAX_COUNT)
  s.cur_requests = math.min(f.cq + requests, LIMIT.MAX_COUNT)
  s.cur_accepts = math.min(f.ca + accepts, LIMIT.MAX_COUNT)
end

-- count_report counts a reported call for the rules that are on.
local function count_report(s, outcome, retry, n)
  local firsts = P.budget_bp > 0 and not retry
  local throttle = P.throttle_k > 0
  if outcome == OUTCOME.CANCELED or (not firsts and not throttle) then return end
  if outcome ~= OUTCOME.SUCCESS then n = 1 end
  local f, q, a = 0, 0, 0
  if firsts then f = n end
  if throttle then
    q = n
    if outcome == OUTCOME.SUCCESS or outcome == OUTCOME.CLIENT_ERROR then a = n end
  end
  count_fleet(s, f, 0, q, a)
end

local function reporter_list(s)
  local rs = {}
  for id, at in string.gmatch(s.reporters, '([^:,]*):(%d+)') do rs[#rs + 1] = {id = id, at = tonumber(at)} end
  return rs
end

local function failure_reporters(s)
  local n, cut = 0, now - P.fleet_window
  for _, r in ipairs(reporter_list(s)) do
    if r.at > cut then n = n + 1 end
  end
  return n
end

-- saw_failure records that reporter id saw an ambiguous failure now.
local function saw_failure(s, id)
  if P.quorum <= 1 then return end
  local cut, keep = now - P.fleet_window, {}
  for _, r in ipairs(reporter_list(s)) do
    if r.at > cut and r.id ~= id then keep[#keep + 1] = r end
  end
  keep[#keep + 1] = {id = id, at = now}
  local parts = {}
  for i = math.max(1, #keep - P.quorum + 1), #keep do
    parts[#parts + 1] = keep[i].id .. ':' .. string.format('%d', keep[i].at)
  end
  s.reporters = table.concat(parts, ',')
end

local function quorate(s) return P.quorum <= 1 or failure_reporters(s) >= P.quorum end

