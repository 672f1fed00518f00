--[[ Append events to a run's stream and publish them for live readers, in one call.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] fence  ARGV[4] events max len
  ARGV[5] batch number (1, 2, ... per attempt's writer)
  ARGV[6..] type, data (JSON) pairs
  A batch whose reply was lost (connection dropped after the script ran; ioredis resends
  unanswered commands on reconnect, and the writer retries) arrives again with the same
  number: it is applied once, so a Redis blip never duplicates tokens in the stream.
  Returns: {0, last event id} | {1} already applied | {-2} LEASE_LOST ]]
--@include lib
local rk, fence, batchNo = KEYS[1], ARGV[3], tonumber(ARGV[5])
if not fenced(rk, fence) then return { -2 } end
local applied = redis.call('HGET', rk, 'appendedBatch')
if applied then
  local f, n = string.match(applied, '^(%d+):(%d+)$')
  if f == fence and tonumber(n) >= batchNo then return { 1 } end
end
redis.call('HSET', rk, 'appendedBatch', fence .. ':' .. batchNo)
local last
for i = 6, #ARGV, 2 do
  last = addEvent(ARGV[1], ARGV[2], tonumber(ARGV[4]), ARGV[i], ARGV[i + 1])
end
flushPublished(ARGV[1])
return { 0, last }
