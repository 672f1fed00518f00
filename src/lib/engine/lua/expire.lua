--[[ A run's ttlMs passed: if it has not started, it ends `expired` (lastError EXPIRED) and
  leaves its session's FIFO (handing the session on when it was the head). A run that
  started is left alone. Safe from every process at once, and early.
  KEYS  run, meta, ready, leases, timers
  O     runId
  Returns: {1, dispatches JSON, record (flat)} when it expired now | {0} ]]
local runId, rk = O.runId, K.run
local member = 'ttl:' .. runId
local r = redis.call('HMGET', rk, 'status', 'startedAt', 'startBy', 'sessionId')
if not WAITING[r[1]] or r[2] or not r[3] then
  redis.call('ZREM', K.timers, member)
  return { 0 }
end
local now = nowMs()
if tonumber(r[3]) > now then
  redis.call('ZADD', K.timers, r[3], member)
  return { 0 }
end
local sk = sessionKey(r[4])
if r[1] == 'queued' and redis.call('HGET', sk, 'active') ~= runId then
  redis.call('LREM', sk .. ':queue', 0, runId)
end
local out = {}
expireRun(runId, now, out)
flushPublished()
return { 1, cjson.encode(out), redis.call('HGETALL', rk) }
