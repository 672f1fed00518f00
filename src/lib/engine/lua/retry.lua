--[[ Schedule the next attempt of a run after a transient failure: status retrying with a
  persisted retryAt and lastError; the lease is released and a delayed job is dispatched.
  The run keeps its scope slot and its session while it waits.
  KEYS  run, pending, leases
  O     runId, fence, delayMs, lastError (JSON text)
  Returns: {0, retryAt, dispatches JSON} | {-2} LEASE_LOST ]]
--@include lib
local runId, rk = O.runId, K.run
if not fenced(rk, O.fence) then return { -2 } end
local now = nowMs()
local retryAt = now + O.delayMs
local r = redis.call('HMGET', rk, 'runtime', 'attempt', 'maxAttempts')
setStatus(runId, r[1], 'running', 'retrying', now)
redis.call('HSET', rk, 'retryAt', retryAt, 'lastError', O.lastError, 'leaseOwner', '', 'leaseExpiresAt', 0)
redis.call('ZREM', K.leases, runId)
local out = {}
enqueueJob(runId, r[1], now, O.delayMs, out)
statusEvent(runId, { status = 'retrying', attempt = tonumber(r[2]),
  maxAttempts = tonumber(r[3]), retryAt = retryAt, lastError = cjson.decode(O.lastError) })
flushPublished()
return { 0, retryAt, cjson.encode(out) }
