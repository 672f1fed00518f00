--[[ A scheduled run (submitted with runAt or delayMs) is due: it joins its session's FIFO
  like a run submitted now (head when the session is free, admitted for a scope slot), and
  its ttlMs starts counting. Safe from every process at once, and early (then it only moves
  the deadline entry).
  KEYS  run, meta, ready, leases, timers
  O     runId
  Returns: {0, dispatches JSON, 1 if it was queued now} ]]
local runId, rk = O.runId, K.run
local member = 'due:' .. runId
local r = redis.call('HMGET', rk, 'status', 'runtime', 'sessionId', 'runAt', 'ttlMs', 'createdAt', 'logTail')
if r[1] ~= 'scheduled' then
  redis.call('ZREM', K.timers, member)
  return { 0, '[]', 0 }
end
local now = nowMs()
if tonumber(r[4]) > now then
  redis.call('ZADD', K.timers, r[4], member)
  return { 0, '[]', 0 }
end
redis.call('ZREM', K.timers, member)
knownTail(runId, r[7])
statusEvent(runId, { status = 'queued', attempt = 0 })
local write = {}
tailInto(runId, write)
setStatus(runId, r[2], 'scheduled', 'queued', now, { createdAt = r[6], fields = write })
if r[5] then setStartBy(runId, tonumber(r[5]), now) end
local out = {}
local sk = sessionKey(r[3])
local active = redis.call('HGET', sk, 'active')
if active then
  joinQueue(sk, runId, active, false)
else
  redis.call('HSET', sk, 'active', runId)
  admit(runId, 'queued', now, out)
end
flushPublished()
return { 0, cjson.encode(out), 1 }
