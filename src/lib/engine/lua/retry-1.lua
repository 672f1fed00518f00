--[[ Schedule the next attempt of a run after a transient failure: status retrying with a
  persisted retryAt and lastError; the lease is released and a delayed job is dispatched.
  The run keeps its scope slot and its session while it waits.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] fence  ARGV[4] delay ms
  ARGV[5] lastError JSON  ARGV[6] events max len  ARGV[7] dispatch grace ms
  Returns: {0, retryAt, dispatches JSON} | {-2} LEASE_LOST ]]
--@include lib
local base, runId, rk = ARGV[1], ARGV[2], KEYS[1]
if not fenced(rk, ARGV[3]) then return { -2 } end
local now, delay = nowMs(), tonumber(ARGV[4])
local retryAt = now + delay
local r = redis.call('HMGET', rk, 'runtime', 'attempt', 'maxAttempts')
setStatus(base, runId, r[1], 'running', 'retrying', now)
redis.call('HSET', rk, 'retryAt', retryAt, 'lastError', ARGV[5], 'leaseOwner', '', 'leaseExpiresAt', 0)
redis.call('ZREM', base .. 'leases', runId)
local out = {}
enqueueJob(base, runId, r[1], now, delay, tonumber(ARGV[7]), out)
statusEvent(base, runId, tonumber(ARGV[6]), { status = 'retrying', attempt = tonumber(r[2]),
  maxAttempts = tonumber(r[3]), retryAt = retryAt, lastError = cjson.decode(ARGV[5]) })
flushPublished(base)
return { 0, retryAt, cjson.encode(out) }
