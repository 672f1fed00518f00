--[[ Append events to a run's stream and publish them for live readers, in one call.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] fence  ARGV[4] events max len
  ARGV[5..] type, data (JSON) pairs
  Returns: {0, last event id} | {-2} LEASE_LOST ]]
--@include lib
if not fenced(KEYS[1], ARGV[3]) then return { -2 } end
local last
for i = 5, #ARGV, 2 do
  last = addEvent(ARGV[1], ARGV[2], tonumber(ARGV[4]), ARGV[i], ARGV[i + 1])
end
flushPublished(ARGV[1])
return { 0, last }
