--[[ Append events to a run's stream and publish them for live readers, in one call.
  KEYS  run
  O     runId, fence, batch (1, 2, ... per attempt's writer)
  ARGV[2..] type, data (JSON text) pairs
  A batch whose reply was lost (connection dropped after the script ran; ioredis resends
  unanswered commands on reconnect, and the writer retries) arrives again with the same
  number: it is applied once, so a Redis blip never duplicates tokens in the stream.
  Returns: {0, last event id ('' for an empty batch)} | {1} already applied | {-2} LEASE_LOST ]]
-- @uses fenced, newWrite, newBatch, knownTail, addEvent, tailInto, writeRecord, lastAdded
-- @uses flushPublished
local rk, fence = K.run, tostring(O.fence)
local ok, rec = fenced(rk, fence, { 'appendedBatch', 'logTail' })
if not ok then return { -2 } end
local w = newWrite()
if not newBatch(fence, O.batch, rec.appendedBatch, w) then return { 1 } end
knownTail(O.runId, rec.logTail)
for i = 2, #ARGV, 2 do addEvent(O.runId, ARGV[i], ARGV[i + 1]) end
tailInto(O.runId, w)
writeRecord(rk, w)
local last = lastAdded(O.runId)
flushPublished()
return { 0, last or '' }