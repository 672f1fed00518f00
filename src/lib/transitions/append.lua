--[[ Append the batches of one or more runs of the scope to their streams, fenced, each applied
  once, and publish them in one notification (the worker's appender gathers its runs' writes
  of one scope into one call: src/lib/streams/appender.ts). The runs' record keys are derived
  from O.base (all in the scope's slot), as the heartbeat's are.
  KEYS  run (the first run's record, which routes the call)
  O     runs [[runId, fence, batch, events], ...]: `batch` is the writer's number (1, 2, ...
        per attempt), `events` how many type/data pairs of ARGV are this run's
  ARGV[2..] every run's events, type, data (JSON text) pairs, in the order of O.runs
  A batch whose reply was lost (connection dropped after the script ran; ioredis resends
  unanswered commands on reconnect, and the writer retries) arrives again with the same
  number: it is applied once, so a Redis blip never duplicates tokens in the stream.
  Returns: per run, in order, a code and the id of its last event ('' when none was added):
           Applied | Duplicate (already applied) | LeaseLost ]]
-- @reply Applied: lastId
-- @reply Duplicate: lastId
-- @reply LeaseLost: lastId
-- @uses fenced, newWrite, newBatch, knownTail, addEvent, tailInto, writeRecord, lastAdded
-- @uses flushPublished, runKey
local out = {}
local at = 2
for _, run in ipairs(O.runs) do
  local runId, fence, batch, count = run[1], tostring(run[2]), run[3], run[4]
  local first = at
  at = at + 2 * count
  local rk = runKey(runId)
  local ok, rec = fenced(rk, fence, { 'appendedBatch', 'logTail' })
  local w = newWrite()
  if not ok then
    out[#out + 1] = CODE.LeaseLost
    out[#out + 1] = ''
  elseif not newBatch(fence, batch, rec.appendedBatch, w) then
    out[#out + 1] = OUTCOME.append.Duplicate
    out[#out + 1] = ''
  else
    knownTail(runId, rec.logTail)
    for i = first, at - 1, 2 do addEvent(runId, ARGV[i], ARGV[i + 1]) end
    tailInto(runId, w)
    writeRecord(rk, w)
    out[#out + 1] = OUTCOME.append.Applied
    out[#out + 1] = lastAdded(runId) or ''
  end
end
flushPublished()
return out
