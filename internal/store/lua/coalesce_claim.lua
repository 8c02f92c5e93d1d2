-- coalesce_claim.lua: claims the idempotency keys of the successes a
-- cooldownd replica coalesced for one connection (internal/server's
-- coalescer), before the sum of the claimed ones is reported as one
-- success (Store.ReportCoalesced, decision 0054). Standalone: no clock of
-- the connection's, no prelude, no state read.
--
-- KEYS[i]: the connection's cd:{t:id}:r:<key> of report i (one hash tag:
--   one Cluster slot with the connection's state).
-- ARGV[1] how long a key is remembered (ms), ARGV[2] now (Unix ms, 0:
--   Redis TIME), ARGV[3] the reports' revision, ARGV[4] their retry flag
--   ('1' or '0'), ARGV[5] the throttle probability the replica answered
--   with, ARGV[5+i] report i's count.
--
-- Each key is remembered as report_fast.lua remembers a report it applied
-- ("<what it said>|<its reply>", REMEMBER_FORMAT): what the report said
-- (outcome SUCCESS, revision, count, retry flag) and the answer the
-- replica gave it (applied, accepted, the revision on a closed
-- connection). A resend to any replica's full Report then finds the key
-- and is answered STATUS.REPLAYED, counting nothing.
-- Reply: for each key, 1 when this run claimed it (count it), 0 when it
-- was remembered for the same report (a resend already applied
-- elsewhere: do not count it again), -1 when it was remembered for a
-- report that said something else (do not count; the caller logs it).
local ttl = ARGV[1]
local now = tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local revision, retry, throttle = ARGV[3], ARGV[4], ARGV[5]
-- REPORT_REPLY as the replica answered: applied, accepted, unchanged, on a
-- closed connection at the revision, no events, no wake.
local out = {}
out[REPORT_AT.status], out[REPORT_AT.accepted], out[REPORT_AT.changed], out[REPORT_AT.created] =
  STATUS.APPLIED, 1, 0, 0
out[REPORT_AT.revision], out[REPORT_AT.phase], out[REPORT_AT.now], out[REPORT_AT.wake] =
  tonumber(revision), PHASE.CLOSED, now, 0
out[REPORT_AT.throttle], out[REPORT_AT.events] = throttle, 0
-- The replica answered from what it learned, not from a read of a write.
out[REPORT_AT.written_at] = 0
local claimed = {}
for i, key in ipairs(KEYS) do
  local said = OUTCOME.SUCCESS .. ':' .. revision .. ':' .. ARGV[5 + i] .. ':' .. retry
  local seen = redis.call('SET', key, string.format(REMEMBER_FORMAT, said, unpack(out)), 'NX', 'GET', 'PX', ttl)
  if not seen then
    claimed[i] = 1
  elseif string.match(seen, '^([^|]*)|') == said then
    claimed[i] = 0
  else
    claimed[i] = -1
  end
end
return claimed
