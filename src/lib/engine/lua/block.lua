--[[ Block a run: a non-idempotent step was started by an earlier holder and never
  recorded a result, so running it again could repeat a side effect. The run keeps its
  session (later turns wait) but gives up its scope slot until an operator resolves it. Like
  a wait, a block does not count against a timeoutMs budget.
  KEYS  run, meta, ready, pending, leases, timers
  O     runId, fence, blocked (JSON text {stepKey, reason, since})
  Returns: {0, dispatches JSON} | {-2} LEASE_LOST ]]
--@include lib
local runId, rk = O.runId, K.run
if not fenced(rk, O.fence) then return { -2 } end
local now = nowMs()
setStatus(runId, redis.call('HGET', rk, 'runtime'), 'running', 'blocked', now)
redis.call('HSET', rk, 'blocked', O.blocked, 'leaseOwner', '', 'leaseExpiresAt', 0)
redis.call('ZREM', K.leases, runId)
local deadline = redis.call('HGET', rk, 'deadlineAt')
if deadline then
  redis.call('HSET', rk, 'budgetLeft', math.max(0, tonumber(deadline) - now))
  redis.call('HDEL', rk, 'deadlineAt')
  redis.call('ZREM', K.timers, 'timeout:' .. runId)
end
releaseSlot()
local out = {}
fillSlots(now, out)
statusEvent(runId, { status = 'blocked', blocked = cjson.decode(O.blocked) })
flushPublished()
return { 0, cjson.encode(out) }
