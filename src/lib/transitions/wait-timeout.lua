--[[ A run's earliest wait deadline passed (the sweeper, or the timer of the process that
  parked it): sleeps that ended and waits that timed out get their outcome, and a waiting
  run is admitted again to go on. Safe from every process at once, and early (it then only
  moves the deadline entry).
  KEYS  run, meta, ready, leases, timers, steps, waits
  O     runId
  Returns: {Checked, dispatches JSON, answered JSON [{key, kind, since}], runtime, agent} ]]
-- @reply Checked: orders, answered, runtime, agent
-- @uses readFields, TERMINAL, knownTail, nowMs, expireWaits, wakeRun, flushPublished
local runId, rk = O.runId, K.run
local member = 'wait:' .. runId
local rec = readFields(rk, { 'status', 'runtime', 'agent', 'logTail' })
if not rec.status or TERMINAL[rec.status] then
  redis.call('ZREM', K.timers, member)
  return { OUTCOME.waitTimeout.Checked, '[]', '[]', '', '' }
end
knownTail(runId, rec.logTail)
local now = nowMs()
local done, nextAt = expireWaits(runId, now)
local out = {}
if #done > 0 and rec.status == 'waiting' then
  -- A budget wait's deadline is its day's end: it slept, it did not time out.
  local slept = done[1].kind == 'sleep' or done[1].kind == 'budget'
  wakeRun(runId, { key = done[1].key, outcome = slept and 'slept' or 'timed-out' }, now, out)
elseif nextAt then
  redis.call('ZADD', K.timers, nextAt, member)
else
  redis.call('ZREM', K.timers, member)
end
flushPublished()
return { OUTCOME.waitTimeout.Checked, cjson.encode(out), cjson.encode(done), rec.runtime, rec.agent }
