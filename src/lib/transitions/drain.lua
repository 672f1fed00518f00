--[[ Drain a runtime for one scope: from now on the scope's runs of that runtime are not
  started there (submit answers DRAINING, admission parks session heads in held:<runtime>).
  The call that raises the flag also parks the runtime's dispatched runs (they hold a scope
  slot and have a job, whose claim would start them): queued again, in held:<runtime>, their
  slots handed on. They are among the scope's slot holders in `leases`, so that call reads
  about MAX_ACTIVE_PER_SCOPE entries. Running and retrying runs go on and finish.
  With cancelQueued, also cancels up to `batch` of the scope's waiting runs (queued or
  dispatched) of that runtime per call; the caller repeats until none remain. The set only
  shrinks while the flag is up, because a draining runtime accepts no submit.
  KEYS  drain (the flag), waiting, held (both of this runtime), meta, ready, leases, timers
  O     runtime, cancelQueued (bool), batch
  Returns: {cancelled now, waiting runs left, dispatches JSON} ]]
-- @reply: cancelled, left, orders
-- @uses nowMs, readFields, runKey, releaseSlot, setStatus, fillSlots, WAITING, cancelRun
-- @uses flushPublished
local now = nowMs()
local out = {}
if redis.call('SET', K.drain, now, 'NX') then
  for _, runId in ipairs(redis.call('ZRANGE', K.leases, 0, -1)) do
    local rec = readFields(runKey(runId), { 'status', 'runtime', 'createdAt', 'concurrencyKey' })
    if rec.status == 'dispatched' and rec.runtime == O.runtime then
      releaseSlot(rec.concurrencyKey or '')
      setStatus({
        runId = runId, runtime = rec.runtime, from = 'dispatched', to = 'queued', now = now,
        known = { createdAt = rec.createdAt },
      })
      redis.call('ZREM', K.leases, runId)
      redis.call('RPUSH', K.held, runId)
    end
  end
  -- The freed slots go to other runtimes' waiting session heads at once.
  fillSlots(now, out)
end
local cancelled = 0
if O.cancelQueued then
  for _, runId in ipairs(redis.call('ZRANGE', K.waiting, 0, O.batch - 1)) do
    local st = redis.call('HGET', runKey(runId), 'status')
    if WAITING[st] then
      cancelRun(runId, now, out)
      cancelled = cancelled + 1
    else
      -- Defensive: an index entry whose run is gone or started no longer waits.
      redis.call('ZREM', K.waiting, runId)
    end
  end
  flushPublished()
end
local left = redis.call('ZCARD', K.waiting)
-- Every run the held list names was waiting; with none left, all its entries are stale.
if O.cancelQueued and left == 0 then redis.call('DEL', K.held) end
return { cancelled, left, cjson.encode(out) }
