-- Status moves and the indexes kept with them (status:<s>, stats:<rt>, waiting:<rt>), and dispatch.
-- @uses runKey, TERMINAL, runtimeKey, WAITING

-- Time a run is held by workers, summed over its attempts and takeovers in `runMs`; the
-- worker stops a run whose sum reaches MAX_RUN_MS. `claimedAt` is when the current holder
-- claimed it; the holding ends at `untilMs` (a status change, a hand-over, the last heartbeat
-- of a holder that died). Time queued, retrying, blocked or waiting holds no worker: not counted.
-- runMs after a holding that began at `claimedAt` ends at `untilMs`, from the fields as read;
-- nil when no holder claimed it (claimedAt absent: false or nil).
local function chargedRunMs(claimedAt, runMs, untilMs)
  if not claimedAt then return nil end
  return (tonumber(runMs) or 0) + math.max(0, untilMs - tonumber(claimedAt))
end

local function chargeRunTime(rk, untilMs)
  local at = redis.call('HGET', rk, 'claimedAt')
  if not at then return end
  redis.call('HDEL', rk, 'claimedAt')
  redis.call('HINCRBY', rk, 'runMs', math.max(0, untilMs - tonumber(at)))
end

-- Moves a run to `to`, keeping the per-runtime status counts exact. `stats:<runtime>` counts
-- moves, one field per kind of move: `<from>><to>` (a new run's is named by its status alone),
-- so a move is one HINCRBY; a status's count is what moved in less what moved out, and a
-- terminal one's what moved in (src/lib/tenancy/runtime-counts.ts). Fields named by a status
-- alone also hold the counts kept before moves were counted, so those stay right.
-- `known` (optional): fields the caller read already (`createdAt`; `claimedAt`, false when
-- absent, with `runMs` for the time charge), and `write`, the caller's buffer of the record's
-- other writes (newWrite in transitions/lib/records.lua), applied with the move: one HSET and at most one HDEL.
-- Returns the fields the HSET wrote, as name/value pairs.
local function setStatus(a)
  local runId, runtime, from, to, now, known = a.runId, a.runtime, a.from, a.to, a.now, a.known
  local rk = runKey(runId)
  local fields = { 'status', to, 'updatedAt', now }
  local w = known and known.write
  local gone = w and { unpack(w.gone) } or {}
  if w then
    for _, v in ipairs(w.set) do fields[#fields + 1] = v end
  end
  local charged
  if from == 'running' and to ~= 'running' then
    if known and known.claimedAt ~= nil then
      charged = chargedRunMs(known.claimedAt, known.runMs, now)
      if charged then fields[#fields + 1] = 'runMs'; fields[#fields + 1] = charged end
    else
      chargeRunTime(rk, now)
    end
  end
  redis.call('HSET', rk, unpack(fields))
  -- A finished run keeps its last holder's claimedAt: nothing charges it again.
  if charged and not TERMINAL[to] then gone[#gone + 1] = 'claimedAt' end
  if #gone > 0 then redis.call('HDEL', rk, unpack(gone)) end
  -- Runs by status (`status:<status>`), scored by creation time like the `runs` listing, so
  -- a listing filtered by status reads that index instead of every run of the scope. Kept
  -- here, where every status change passes, so a status added later is indexed as well.
  -- Entries of expired runs are dropped by the listing that meets them, as in `runs`.
  if from then redis.call('ZREM', call.base .. 'status:' .. from, runId) end
  local createdAt = known and known.createdAt or redis.call('HGET', rk, 'createdAt')
  redis.call('ZADD', call.base .. 'status:' .. to, createdAt, runId)
  local sk = runtimeKey('stats', runtime)
  redis.call('HINCRBY', sk, from and (from .. '>' .. to) or to, 1)
  -- NX: a run parked again (dispatched -> queued) keeps the time it started to wait; one that
  -- was waiting already (queued -> dispatched) is in the index.
  if WAITING[to] then
    if not (from and WAITING[from]) then redis.call('ZADD', runtimeKey('waiting', runtime), 'NX', now, runId) end
  elseif from and WAITING[from] then
    redis.call('ZREM', runtimeKey('waiting', runtime), runId)
  end
  -- A run in status `waiting` also counts under `wait:<kind>` for each kind of wait it waits
  -- on (the baton_runs_waiting gauge); `waitKinds` (transitions/wait.lua sets it) says which.
  if from == 'waiting' then
    local kinds = redis.call('HGET', runKey(runId), 'waitKinds')
    if kinds then
      for _, kind in ipairs(cjson.decode(kinds)) do redis.call('HINCRBY', sk, 'wait:' .. kind, -1) end
      redis.call('HDEL', runKey(runId), 'waitKinds')
    end
  end
  return fields
end

-- Hands a run to BullMQ through the outbox: bumps the dispatch number (the job id is
-- `<runId>-<dispatch>`) and records when a job must exist by, as the run's score in `leases`
-- (the index of runs handed out: to BullMQ until a claim, to a worker after); the caller
-- adds the job to the queue of the run's runtime and agent (only workers serving the agent
-- take from it).
-- `n` (optional): the dispatch number, when the caller wrote it already. `agent` (optional):
-- the run's agent, when the caller has it.
local function enqueueJob(a)
  local runId, runtime, now, delay, out, n, agent = a.runId, a.runtime, a.now, a.delay, a.out, a.n, a.agent
  n = n or redis.call('HINCRBY', runKey(runId), 'dispatch', 1)
  agent = agent or redis.call('HGET', runKey(runId), 'agent')
  redis.call('ZADD', call.K.leases, now + delay + call.O.graceMs, runId)
  out[#out + 1] = { runId, runtime, n, delay, agent }
end
