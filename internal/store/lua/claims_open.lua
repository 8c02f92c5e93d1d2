-- claims_open.lua and claims_close.lua: a coalesced batch's report with
-- the claims of its keyed reports, in one script (Store.ReportCoalesced,
-- decisions 0054 and 0063). The parts: head.lua, this, report_fast.lua,
-- the prelude, report.lua, claims_close.lua; the report's parts run as one
-- function (report_body) so that claims_close.lua can answer with the
-- claims beside the report's reply.
--
-- KEYS[1], KEYS[2] as report.lua's; KEYS[3..] the connection's
--   cd:{t:id}:r:<key> of keyed report i = 1.. (one hash tag: one Cluster
--   slot with the state). They are taken off KEYS before the report runs:
--   the batch's report has no idempotency key of its own.
-- ARGV as report.lua's, but ARGV[15] is the count of the unkeyed reports
--   (0 when all are keyed), ARGV[18] how long a key is remembered (ms),
--   ARGV[19] the throttle probability the replica answered with, and
--   ARGV[19 + i] keyed report i's count.
--
-- Each key is claimed as report_fast.lua remembers a report it applied
-- ("<what it said>|<its reply>", REMEMBER_FORMAT): what the report said
-- (outcome SUCCESS, revision, count, retry flag) and the answer the
-- replica gave it (applied, accepted, the revision on a closed
-- connection). A resend to any replica's full Report then finds the key
-- and is answered STATUS.REPLAYED, counting nothing. A claimed key's count
-- joins ARGV[15]; the report runs on the sum.
--
-- Reply: {claims} when nothing is left to report, {claims, the report's
-- reply} otherwise. claims[i] is 1 when this run claimed key i (counted),
-- 0 when it was remembered for the same report (a resend applied
-- elsewhere), -1 when it was remembered for a report that said something
-- else (not counted; the caller logs it).
local CLAIM_KEYS, CLAIMED = {}, {}
do
  for i = #KEYS, 3, -1 do
    CLAIM_KEYS[i - 2] = KEYS[i]
    KEYS[i] = nil
  end
  local revision, retry, ttl, throttle = ARGV[5], ARGV[16], ARGV[18], ARGV[19]
  -- REPORT_REPLY as the replica answered: applied, accepted, unchanged, on
  -- a closed connection at the revision, no events, no wake.
  local out = {}
  out[REPORT_AT.status], out[REPORT_AT.accepted], out[REPORT_AT.changed], out[REPORT_AT.created] =
    STATUS.APPLIED, 1, 0, 0
  out[REPORT_AT.revision], out[REPORT_AT.phase], out[REPORT_AT.now], out[REPORT_AT.wake] =
    tonumber(revision), PHASE.CLOSED, now, 0
  out[REPORT_AT.throttle], out[REPORT_AT.events] = throttle, 0
  -- The replica answered from what it learned, not from a read of a write.
  out[REPORT_AT.written_at] = 0
  local n = tonumber(ARGV[15]) or 0
  for i, key in ipairs(CLAIM_KEYS) do
    local count = ARGV[19 + i]
    local said = OUTCOME.SUCCESS .. ':' .. revision .. ':' .. count .. ':' .. retry
    local seen = redis.call('SET', key, string.format(REMEMBER_FORMAT, said, unpack(out)), 'NX', 'GET', 'PX', ttl)
    if not seen then
      CLAIMED[i] = 1
      n = n + tonumber(count)
    elseif string.match(seen, '^([^|]*)|') == said then
      CLAIMED[i] = 0
    else
      CLAIMED[i] = -1
    end
  end
  if n <= 0 then return {CLAIMED} end
  ARGV[15] = string.format('%d', n)
end

local function report_body()
