--[[ Schedule the next attempt of a run after a transient failure: status retrying with a
  persisted retryAt and lastError; the lease is released and a delayed job is dispatched.
  The run keeps its scope slot and its session while it waits.
  KEYS  run, leases
  O     runId, fence, delayMs, lastError (JSON text)
  Returns: {Retrying, retryAt, dispatches JSON} | {LeaseLost} ]]
-- @reply Retrying: retryAt, orders
-- @reply LeaseLost
-- @uses fenced, nowMs, knownTail, statusEvent, newWrite, tailInto, setStatus, enqueueJob
-- @uses flushPublished
local runId, rk = O.runId, K.run
local ok, rec = fenced(rk, O.fence, { 'runtime', 'attempt', 'maxAttempts', 'logTail', 'createdAt', 'claimedAt', 'runMs' })
if not ok then return { CODE.LeaseLost } end
local now = nowMs()
local retryAt = now + O.delayMs
knownTail(runId, rec.logTail)
statusEvent(runId, { status = 'retrying', attempt = tonumber(rec.attempt),
  maxAttempts = tonumber(rec.maxAttempts), retryAt = retryAt, lastError = cjson.decode(O.lastError) })
local w = newWrite('retryAt', retryAt, 'lastError', O.lastError, 'leaseOwner', '')
tailInto(runId, w)
setStatus({
  runId = runId, runtime = rec.runtime, from = 'running', to = 'retrying', now = now,
  known = { createdAt = rec.createdAt, claimedAt = rec.claimedAt, runMs = rec.runMs or '0', write = w },
})
-- The run's entry in `leases` moves from its lease's deadline to its next job's.
local out = {}
enqueueJob({ runId = runId, runtime = rec.runtime, now = now, delay = O.delayMs, out = out })
flushPublished()
return { OUTCOME.retry.Retrying, retryAt, cjson.encode(out) }
