--[[ A run's ttlMs passed: if it has not started, it ends `expired` (lastError EXPIRED) and
  leaves its session's FIFO (handing the session on when it was the head). A run that
  started is left alone. Safe from every process at once, and early.
  KEYS  run, meta, ready, leases, timers
  O     runId
  Returns: {Ended, dispatches JSON, record (flat)} when it expired now | {Unchanged} ]]
-- @reply Unchanged
-- @reply Ended: orders, run
-- @uses readFields, WAITING, nowMs, sessionKey, expireRun, flushPublished
local runId, rk = O.runId, K.run
local member = 'ttl:' .. runId
local rec = readFields(rk, { 'status', 'startedAt', 'startBy', 'sessionId' })
if not WAITING[rec.status] or rec.startedAt or not rec.startBy then
  redis.call('ZREM', K.timers, member)
  return { OUTCOME.expire.Unchanged }
end
local now = nowMs()
if tonumber(rec.startBy) > now then
  redis.call('ZADD', K.timers, rec.startBy, member)
  return { OUTCOME.expire.Unchanged }
end
local sk = sessionKey(rec.sessionId)
if rec.status == 'queued' and redis.call('HGET', sk, 'active') ~= runId then
  redis.call('LREM', sk .. ':queue', 0, runId)
end
local out = {}
expireRun(runId, now, out)
flushPublished()
return { OUTCOME.expire.Ended, cjson.encode(out), redis.call('HGETALL', rk) }
