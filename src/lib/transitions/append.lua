--[[ Append the batches of one or more runs of the scope to their streams, fenced, each applied
  once, and publish them in one notification (the worker's appender gathers its runs' writes
  of one scope into one call: src/lib/streams/appender.ts). The runs' record keys are derived
  from O.base (all in the scope's slot), as the heartbeat's are.
  KEYS  run (the first run's record, which routes the call)
  O     runs [[runId, fence, batch, events], ...]: fence and `batch` (the writer's number: 1, 2, ...
        per attempt) as text, `events` how many type/data pairs of ARGV are this run's
  ARGV[2..] every run's events, type, data (JSON text) pairs, in the order of O.runs
  A batch whose reply was lost (connection dropped after the script ran; ioredis resends
  unanswered commands on reconnect, and the writer retries) arrives again with the same
  number: it is applied once, so a Redis blip never duplicates tokens in the stream.
  Returns: per run, in order, its code: Applied | Duplicate (already applied) | LeaseLost ]]
-- @reply Applied
-- @reply Duplicate
-- @reply LeaseLost
-- @uses fenceRead, readFields, holds, applied, runKey, lastEntryId, logEntry, notify
-- Written for the hot path (one call a worker tick carries every streaming run's batch): per
-- run one HMGET, its XADDs and one HSET, and no tables but the fields read and the
-- notification's. The list of fields to read is made once a call: made once a run, it cost
-- about 6 % of the function's Redis CPU (docs/benchmarks.md, "One field list a call").
local out = {}
local runs = {}
local READ = fenceRead({ 'appendedBatch', 'logTail' })
-- The notification's entry of each run written to (a run whose two batches share a call has one).
local entryOf = {}
local at = 2
for _, run in ipairs(O.runs) do
  local runId, fence, batch, count = run[1], run[2], run[3], run[4]
  local first = at
  at = at + 2 * count
  local rk = runKey(runId)
  local rec = readFields(rk, READ)
  if not holds(rec, fence) then
    out[#out + 1] = CODE.LeaseLost
  elseif applied(rec.appendedBatch, fence, batch) then
    out[#out + 1] = OUTCOME.append.Duplicate
  else
    local mark = fence .. ':' .. batch
    if count == 0 then
      redis.call('HSET', rk, 'appendedBatch', mark)
    else
      local sk = rk .. ':events'
      local entry = entryOf[runId]
      if not entry then
        entry = { runId, rec.logTail or lastEntryId(sk), {} }
        entryOf[runId] = entry
        runs[#runs + 1] = entry
      end
      local events = entry[3]
      local lastId
      for i = first, at - 1, 2 do
        lastId = logEntry(sk, ARGV[i], ARGV[i + 1])
        events[#events + 1] = { lastId, ARGV[i], ARGV[i + 1] }
      end
      -- Where the log ends now, kept in the record (events.lua: knownTail).
      redis.call('HSET', rk, 'appendedBatch', mark, 'logTail', lastId)
    end
    out[#out + 1] = OUTCOME.append.Applied
  end
end
if #runs > 0 then notify(runs) end
return out
