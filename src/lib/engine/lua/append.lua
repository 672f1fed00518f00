--[[ Append events to a run's stream and publish them for live readers, in one call.
  KEYS  run
  O     runId, fence, batch (1, 2, ... per attempt's writer)
  ARGV[2..] type, data (JSON text) pairs
  A batch whose reply was lost (connection dropped after the script ran; ioredis resends
  unanswered commands on reconnect, and the writer retries) arrives again with the same
  number: it is applied once, so a Redis blip never duplicates tokens in the stream.
  Returns: {0, last event id} | {1} already applied | {-2} LEASE_LOST ]]
--@include core
local rk, fence = K.run, tostring(O.fence)
local ok, got = fenced(rk, fence, 'appendedBatch')
if not ok then return { -2 } end
if not newBatch(rk, fence, O.batch, got[1]) then return { 1 } end
local last
for i = 2, #ARGV, 2 do
  last = addEvent(O.runId, ARGV[i], ARGV[i + 1])
end
flushPublished()
return { 0, last }
