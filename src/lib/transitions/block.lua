--[[ Block a run: a non-idempotent step was started by an earlier holder and never
  recorded a result, so running it again could repeat a side effect. The run keeps its
  session (later turns wait) but gives up its scope slot until an operator resolves it. Like
  a wait, a block does not count against a timeoutMs budget.
  KEYS  run, meta, ready, leases, timers
  O     runId, fence, blocked (JSON text {stepKey, reason, since})
  Returns: {Blocked, dispatches JSON} | {LeaseLost} ]]
-- @reply Blocked: orders
-- @reply LeaseLost
-- @uses fenced, nowMs, knownTail, statusEvent, newWrite, put, drop, tailInto, setStatus
-- @uses releaseSlot, fillSlots, flushPublished
local runId, rk = O.runId, K.run
local ok, rec = fenced(rk, O.fence, { 'runtime', 'deadlineAt', 'logTail', 'createdAt', 'claimedAt', 'runMs', 'concurrencyKey' })
if not ok then return { CODE.LeaseLost } end
local now = nowMs()
knownTail(runId, rec.logTail)
statusEvent(runId, { status = 'blocked', blocked = cjson.decode(O.blocked) })
local w = newWrite('blocked', O.blocked, 'leaseOwner', '')
local deadline = rec.deadlineAt
if deadline then
  put(w, 'budgetLeft', math.max(0, tonumber(deadline) - now))
  drop(w, 'deadlineAt')
  redis.call('ZREM', K.timers, 'timeout:' .. runId)
end
tailInto(runId, w)
setStatus({
  runId = runId, runtime = rec.runtime, from = 'running', to = 'blocked', now = now,
  known = { createdAt = rec.createdAt, claimedAt = rec.claimedAt, runMs = rec.runMs or '0', write = w },
})
redis.call('ZREM', K.leases, runId)
releaseSlot(rec.concurrencyKey or '')
local out = {}
fillSlots(now, out)
flushPublished()
return { OUTCOME.block.Blocked, cjson.encode(out) }
