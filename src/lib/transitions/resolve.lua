--[[ Resolve a blocked run's step: 'value' stores the operator's result as the step's
  result; 'rerun' forgets the start marker so the step runs again. Either way the run
  is admitted again (it still owns its session), to continue the attempt it was in.
  KEYS  run, steps, meta, ready, leases, timers
  O     runId, stepKey, mode (value | rerun), value (JSON text {v}, mode value)
  Returns: {Resolved, dispatches JSON} | {NotFound} | {StepNotBlocked} ]]
-- @reply Resolved: orders
-- @reply NotFound
-- @reply StepNotBlocked
-- @uses readFields, knownTail, nowMs, statusEvent, newWrite, drop, tailInto, writeRecord, admit
-- @uses flushPublished
local runId, rk, stepKey = O.runId, K.run, O.stepKey
local rec = readFields(rk, { 'status', 'blocked', 'logTail' })
if not rec.status then return { CODE.NotFound } end
if rec.status ~= 'blocked' or cjson.decode(rec.blocked).stepKey ~= stepKey then return { CODE.StepNotBlocked } end
knownTail(runId, rec.logTail)
local now = nowMs()
if O.mode == 'value' then redis.call('HSET', K.steps, stepKey, O.value) end
redis.call('HDEL', K.steps, stepKey .. '#started')
statusEvent(runId, { status = 'queued', resolved = { stepKey = stepKey, mode = O.mode } })
-- The next claim continues the interrupted attempt instead of counting a new one.
local w = newWrite('resumed', 1)
drop(w, 'blocked')
tailInto(runId, w)
writeRecord(rk, w)
local out = {}
admit({ runId = runId, from = 'blocked', now = now, out = out })
flushPublished()
return { OUTCOME.resolve.Resolved, cjson.encode(out) }
