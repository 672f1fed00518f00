-- Admission: a session head gets a slot, or is parked by concurrency key and priority.
-- @uses readyQueue, keyFull, READY_CAPPED, setStatus, enqueueJob, activeCount, scopeLimits, readFields
-- @uses runKey, runtimeKey, DEFAULT_PRIORITY, lineWaiting

-- A key with parked runs joins the turns at the back of the line (a key in line keeps its place).
local function joinTurns(key)
  if redis.call('ZSCORE', call.K.ready, key) then return end
  redis.call('ZADD', call.K.ready, redis.call('HINCRBY', call.K.meta, 'turn', 1), key)
end

-- `since`: when the run became due (its runAt, else its submit).
local function park(runId, key, priority, since)
  if redis.call('ZADD', readyQueue(key), since - priority * call.O.priorityStepMs, runId) == 1 then
    call.parked = redis.call('HINCRBY', call.K.meta, 'parked', 1)
  end
  if keyFull(key) then redis.call('SADD', call.base .. READY_CAPPED, key) else joinTurns(key) end
end

-- A parked run that ends without starting (cancelled, expired) leaves at once.
local function unpark(runId, key)
  local q = readyQueue(key)
  if redis.call('ZREM', q, runId) == 0 then return end
  call.parked = redis.call('HINCRBY', call.K.meta, 'parked', -1)
  if redis.call('EXISTS', q) == 0 then
    redis.call('ZREM', call.K.ready, key)
    redis.call('SREM', call.base .. READY_CAPPED, key)
  end
end

local function dispatchRun(a)
  local runId, runtime, from, now, out, known, key = a.runId, a.runtime, a.from, a.now, a.out, a.known, a.key
  call.active = redis.call('HINCRBY', call.K.meta, 'active', 1)
  if key ~= '' then redis.call('HINCRBY', call.K.meta, 'key:' .. key, 1) end
  setStatus({ runId = runId, runtime = runtime, from = from, to = 'dispatched', now = now, known = known })
  enqueueJob({ runId = runId, runtime = runtime, now = now, delay = 0, out = out })
end

-- Gives free slots to parked runs: one run per turn, to the key whose turn it is, the best
-- of its runs (priority, then age). A key found at its cap waits in ready:capped. Runs of a
-- drained runtime go to its held:<runtime> list instead.
local function fillSlots(now, out)
  if call.parked == 0 then return end
  while true do
    local key = redis.call('ZRANGE', call.K.ready, 0, 0)[1]
    if not key or activeCount() >= scopeLimits().slots then return end
    if keyFull(key) then
      redis.call('ZREM', call.K.ready, key)
      redis.call('SADD', call.base .. READY_CAPPED, key)
    else
      local q = readyQueue(key)
      local runId = redis.call('ZPOPMIN', q)[1]
      if runId then call.parked = redis.call('HINCRBY', call.K.meta, 'parked', -1) end
      if redis.call('EXISTS', q) == 0 then
        redis.call('ZREM', call.K.ready, key)
      else
        redis.call('ZADD', call.K.ready, redis.call('HINCRBY', call.K.meta, 'turn', 1), key)
      end
      local rec = runId and readFields(runKey(runId), { 'status', 'runtime', 'createdAt' })
      if rec and rec.status == 'queued' then
        if redis.call('EXISTS', runtimeKey('drain', rec.runtime)) == 1 then
          redis.call('RPUSH', runtimeKey('held', rec.runtime), runId)
        else
          dispatchRun({
            runId = runId, runtime = rec.runtime, from = 'queued', now = now, out = out,
            known = { createdAt = rec.createdAt }, key = key,
          })
        end
      end
    end
  end
end

-- The fields admit reads of a run.
local ADMIT_READ = { 'runtime', 'createdAt', 'runAt', 'priority', 'concurrencyKey' }

-- A session head asks for a scope slot. Draining runtimes hold their runs; a run finding no
-- slot, or other runs parked before it, is parked. `from` is the run's current status.
-- `known` (optional): the run's ADMIT_READ fields when the caller has them (false when
-- absent, as readFields gives them), and `drained` (boolean) when it already looked at the
-- runtime's drain flag.
local function admit(a)
  local runId, from, now, out, known = a.runId, a.from, a.now, a.out, a.known
  local rec = known or readFields(runKey(runId), ADMIT_READ)
  local runtime = rec.runtime
  local statusKnown = { createdAt = rec.createdAt }
  if from ~= 'queued' then setStatus({
    runId = runId, runtime = runtime, from = from, to = 'queued', now = now, known = statusKnown,
  }); from = 'queued' end
  local drained
  if rec.drained ~= nil then drained = rec.drained else drained = redis.call('EXISTS', runtimeKey('drain', runtime)) == 1 end
  if drained then
    redis.call('RPUSH', runtimeKey('held', runtime), runId)
    return
  end
  local key = rec.concurrencyKey or ''
  if activeCount() >= scopeLimits().slots or keyFull(key) then
    park(runId, key, tonumber(rec.priority) or DEFAULT_PRIORITY, tonumber(rec.runAt or rec.createdAt))
  elseif lineWaiting() then
    -- Runs parked before it that may start now (a limit was raised): it takes its turn with them.
    park(runId, key, tonumber(rec.priority) or DEFAULT_PRIORITY, tonumber(rec.runAt or rec.createdAt))
    fillSlots(now, out)
  else
    dispatchRun({ runId = runId, runtime = runtime, from = from, now = now, out = out, known = statusKnown, key = key })
  end
end

-- A run gives its slot back (`key`: its concurrency key, '' for none). A key that was at its
-- cap with runs parked rejoins the turns. The caller fills the freed slot (fillSlots).
local function releaseSlot(key)
  -- Never below zero (the count was 0 when this script had not read it yet).
  if call.active == nil or call.active > 0 then
    call.active = redis.call('HINCRBY', call.K.meta, 'active', -1)
    if call.active < 0 then
      redis.call('HSET', call.K.meta, 'active', 0)
      call.active = 0
    end
  end
  if key == '' then return end
  if redis.call('HINCRBY', call.K.meta, 'key:' .. key, -1) <= 0 then redis.call('HDEL', call.K.meta, 'key:' .. key) end
  if redis.call('SREM', call.base .. READY_CAPPED, key) == 1 then joinTurns(key) end
end
