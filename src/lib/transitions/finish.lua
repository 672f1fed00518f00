--[[ Finish a run: terminal status and result, the turn committed to the session history
  (user message + answer together, exactly once: this script runs once per run because it
  requires the current fence of a running run), `end` event, session and slot handed on.
  KEYS  run, meta, ready, leases, timers, messages (the run's session history)
  O     runId, fence, status (succeeded | failed | cancelled), result (JSON text),
        lastError (JSON text, absent = none), turn ([user JSON, ..., assistant JSON]: the user message,
        with steering messages the ones the run took between its answer's parts; absent = commit nothing),
        batch (the writer's number for the events in ARGV, absent = none: see append.lua)
  ARGV[2..] the attempt's last events, type/data pairs, appended before `end` unless their batch was applied
  Returns: {Finished, dispatches JSON, steering messages left (each now the session's next turn)} | {LeaseLost} ]]
-- @reply Finished: orders, notDelivered
-- @reply LeaseLost
-- @uses fenced, FINISH_READ, newWrite, put, knownTail, newBatch, addEvent, finishRun
-- @uses flushPublished
local runId, rk = O.runId, K.run
local ok, rec = fenced(rk, O.fence, FINISH_READ)
if not ok then return { CODE.LeaseLost } end
local w = newWrite('result', O.result)
if O.lastError then put(w, 'lastError', O.lastError) end
knownTail(runId, rec.logTail)
if O.batch and newBatch(O.fence, O.batch, rec.appendedBatch, w) then
  for i = 2, #ARGV, 2 do addEvent(runId, ARGV[i], ARGV[i + 1]) end
end
if O.turn then redis.call('RPUSH', K.messages, unpack(O.turn)) end
local endData = '{"status":"' .. O.status .. '","result":' .. O.result
if O.lastError then endData = endData .. ',"error":' .. O.lastError end
endData = endData .. '}'
local out = {}
-- Its time is that of its first event (nowMs in transitions/lib/call.lua): no TIME.
local notDelivered = finishRun({
  runId = runId, status = O.status, write = w, endData = endData, out = out, rec = rec, held = true,
})
flushPublished()
return { OUTCOME.finish.Finished, cjson.encode(out), notDelivered }
