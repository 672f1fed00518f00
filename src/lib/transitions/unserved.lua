--[[ A dispatched run whose agent no live worker of its runtime served for AGENT_GRACE_MS
  (the sweeper judges that from the registry) fails with UNKNOWN_AGENT, unless it moved on
  since the sweeper read it: claimed, cancelled, or dispatched again (another number).
  KEYS  run, meta, ready, leases, timers
  O     runId, dispatch (the number the sweeper read), message (the error's)
  Returns: {Ended, dispatches JSON, record (flat)} when it failed now | {Unchanged} ]]
-- @reply Unchanged
-- @reply Ended: orders, run
-- @uses readFields, finishRun, newWrite, flushPublished
local runId, rk = O.runId, K.run
local rec = readFields(rk, { 'status', 'dispatch' })
if rec.status ~= 'dispatched' or rec.dispatch ~= tostring(O.dispatch) then return { OUTCOME.unserved.Unchanged } end
local result = '{"answer":"","finishReason":"error","toolCallsSeen":0}'
local err = cjson.encode({ code = 'UNKNOWN_AGENT', message = O.message })
local out = {}
finishRun({
  runId = runId, status = 'failed', write = newWrite('result', result, 'lastError', err),
  endData = '{"status":"failed","result":' .. result .. ',"error":' .. err .. '}', out = out,
})
flushPublished()
return { OUTCOME.unserved.Ended, cjson.encode(out), redis.call('HGETALL', rk) }
