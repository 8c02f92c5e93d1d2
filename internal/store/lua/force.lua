-- force: ARGV[19] override (0 clear, 1 forced open, 2 forced closed, 3 reset),
-- ARGV[20] duration ms from now (0: until changed), ARGV[21] actor, ARGV[22] reason.
-- Returns the encoded state, then the events.
local s = load()
settle(s)
local o, d, actor, reason = tonumber(ARGV[19]), tonumber(ARGV[20]), ARGV[21], ARGV[22]
local untilMs = 0
if d > 0 then untilMs = now + d end
if o == 3 then
  s.ov, s.ovu, s.ro = 0, 0, 0
  reset_counts(s)
  transition(s, CLOSED, 7, actor, reason)
else
  s.ov, s.ovu = o, untilMs
  if o == 1 then
    transition(s, OPEN, 6, actor, reason)
    s.ou = untilMs
  elseif o == 2 then
    reset_counts(s)
    transition(s, CLOSED, 6, actor, reason)
  else
    s.ovu = 0
    reset_counts(s)
    transition(s, CLOSED, 7, actor, reason)
  end
end
save(s)
emit(s)
return with_events(encode(s))
