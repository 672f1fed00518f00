--[[ A scheduled run (submitted with runAt or delayMs) is due: it joins its session's FIFO
  like a run submitted now (head when the session is free, admitted for a scope slot), and
  its ttlMs starts counting. Safe from every process at once, and early (then it only moves
  the deadline entry).
  KEYS  run, meta, ready, leases, timers
  O     runId
  Returns: {Checked, dispatches JSON, 1 if it was queued now} ]]
-- @reply Checked: orders, joined
-- @uses readFields, nowMs, knownTail, statusEvent, newWrite, tailInto, setStatus, setStartBy
-- @uses sessionKey, joinQueue, admit, flushPublished
local runId, rk = O.runId, K.run
local member = 'due:' .. runId
local rec = readFields(rk, { 'status', 'runtime', 'sessionId', 'runAt', 'ttlMs', 'createdAt', 'logTail' })
if rec.status ~= 'scheduled' then
  redis.call('ZREM', K.timers, member)
  return { OUTCOME.due.Checked, '[]', 0 }
end
local now = nowMs()
if tonumber(rec.runAt) > now then
  redis.call('ZADD', K.timers, rec.runAt, member)
  return { OUTCOME.due.Checked, '[]', 0 }
end
redis.call('ZREM', K.timers, member)
knownTail(runId, rec.logTail)
statusEvent(runId, { status = 'queued', attempt = 0 })
local w = newWrite()
tailInto(runId, w)
setStatus({
  runId = runId, runtime = rec.runtime, from = 'scheduled', to = 'queued', now = now,
  known = { createdAt = rec.createdAt, write = w },
})
if rec.ttlMs then setStartBy(runId, tonumber(rec.ttlMs), now) end
local out = {}
local sk = sessionKey(rec.sessionId)
local active = redis.call('HGET', sk, 'active')
if active then
  joinQueue(sk, runId, active, false)
else
  redis.call('HSET', sk, 'active', runId)
  admit({ runId = runId, from = 'queued', now = now, out = out })
end
flushPublished()
return { OUTCOME.due.Checked, cjson.encode(out), 1 }
