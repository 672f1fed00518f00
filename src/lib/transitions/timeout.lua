--[[ A run's timeoutMs budget ended. A running run is stopped by the worker holding it (its
  timer aborts ctx.signal, and the answer so far is committed as incomplete); should that
  worker be gone, the claim that takes the run over ends it. So here: a running run only has
  its entry looked at again later; a run between attempts (retrying) fails with TIMEOUT now.
  A waiting or blocked run has no deadline (its budget is parked). Safe from every process.
  KEYS  run, meta, ready, leases, timers
  O     runId
  Returns: {Ended, dispatches JSON, record (flat)} when it failed now | {Unchanged} ]]
-- @reply Unchanged
-- @reply Ended: orders, run
-- @uses readFields, TERMINAL, nowMs, timeOutRun, flushPublished
local runId, rk = O.runId, K.run
local member = 'timeout:' .. runId
local rec = readFields(rk, { 'status', 'deadlineAt' })
if not rec.status or TERMINAL[rec.status] or not rec.deadlineAt then
  redis.call('ZREM', K.timers, member)
  return { OUTCOME.timeout.Unchanged }
end
local now = nowMs()
if tonumber(rec.deadlineAt) > now then
  redis.call('ZADD', K.timers, rec.deadlineAt, member)
  return { OUTCOME.timeout.Unchanged }
end
if rec.status == 'running' then
  redis.call('ZADD', K.timers, now + O.graceMs, member)
  return { OUTCOME.timeout.Unchanged }
end
local out = {}
timeOutRun(runId, now, out)
flushPublished()
return { OUTCOME.timeout.Ended, cjson.encode(out), redis.call('HGETALL', rk) }
