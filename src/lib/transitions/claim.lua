--[[ Claim a run for a worker: a new attempt of a dispatched or retrying run, or the
  takeover of a running run whose lease expired (recovery). Bumps the fence either way.
  A run that never started and whose ttlMs passed ends `expired` here instead of starting
  late; a run whose timeoutMs budget is used up (a takeover or a retry after the deadline)
  fails with TIMEOUT. A run given timeoutMs gets its deadline at its first start, or what
  was left of its budget when it resumes after a wait.
  KEYS  run, meta, ready, leases, timers
  O     runId, workerId, leaseMs
        maxRecoveries  takeovers allowed after the holder's lease ran out (not counting
                       shutdown hand-overs); the next one fails the run with RECOVERY_LIMIT
        agentDefaults  {agentName: maxAttempts} of this worker's agents that declare one
                       (absent = none): the first claim of a run whose submit gave no
                       maxAttempts takes its agent's default
        historyReads   {agentName: n}: the session's newest n messages come with the claim
                       (-1 all; absent or 0 none), so a claim costs what the agent's memory
                       keeps, not what the session holds
        historyBytes   at most this many bytes of those messages (HISTORY_READ_MAX_BYTES): the
                       newest that fit, so a session of huge turns costs a claim this much
  Returns (fields below): Claimed (record, steps flat; history: the newest historyReads messages
  that fit historyBytes, historyCut 1 when older ones asked for did not; deadline: timeoutMs's, 0 =
  none) | Ended: cancelled (a cancel was requested while no worker held it), expired, or failed
  (TIMEOUT, or RECOVERY_LIMIT: lost more than maxRecoveries times) | NotFound | NotRunnable | LeaseHeld ]]
-- @reply Claimed: fence, attempt, recovered, run, steps, history, deadline, now, historyCut
-- @reply Ended: orders, status
-- @reply NotFound
-- @reply NotRunnable: status
-- @reply LeaseHeld: value
-- @uses knownTail, nowMs, finishRun, newWrite, CANCELLED_RESULT, flushPublished, expireRun
-- @uses timeOutRun, put, addEvent, chargedRunMs, drop, statusEvent, tailInto, writeRecord
-- @uses setStatus, sessionKey, historyWithin, int
local runId, rk = O.runId, K.run
-- The whole record, in one read: what the claim looks at and, with this call's writes
-- applied at the end, what it answers. The HINCRBY counters below update `rec` as they go.
local flat = redis.call('HGETALL', rk)
if #flat == 0 then return { CODE.NotFound } end
local rec = {}
for i = 1, #flat, 2 do rec[flat[i]] = flat[i + 1] end
local st, runtime = rec.status, rec.runtime
knownTail(runId, rec.logTail)

local recovered = 0
-- When a dead holder's lease ran out (its last heartbeat + leaseMs), for the time charge.
local lapsedAt = 0
if st == 'running' then
  -- The lease's deadline is its score in `leases` (heartbeats renew only that). A holder
  -- that handed the run over (no owner) ends its lease at once; a lease the sweeper found
  -- over is marked `leaseLapsed` (its deadline), since the sweeper then moves the score on
  -- to when it looks again; a heartbeat that comes after all removes the mark.
  if rec.leaseOwner ~= '' then
    lapsedAt = tonumber(rec.leaseLapsed or redis.call('ZSCORE', K.leases, runId) or '0')
    if not rec.leaseLapsed and lapsedAt > nowMs() then return { CODE.LeaseHeld, lapsedAt } end
  end
  recovered = 1
elseif st == 'retrying' then
  local at = tonumber(rec.retryAt or '0')
  if at > nowMs() then return { CODE.LeaseHeld, at } end
elseif st ~= 'dispatched' then
  return { CODE.NotRunnable, st }
end

local out = {}
if rec.cancelRequested == '1' then
  finishRun({ runId = runId, status = 'cancelled', write = newWrite('result', CANCELLED_RESULT), now = nowMs(), out = out,
    endData = '{"status":"cancelled","result":' .. CANCELLED_RESULT .. '}' })
  flushPublished()
  return { OUTCOME.claim.Ended, cjson.encode(out), 'cancelled' }
end
if not rec.startedAt and rec.startBy and tonumber(rec.startBy) <= nowMs() then
  expireRun(runId, nowMs(), out)
  flushPublished()
  return { OUTCOME.claim.Ended, cjson.encode(out), 'expired' }
end
if rec.deadlineAt and tonumber(rec.deadlineAt) <= nowMs() then
  timeOutRun(runId, nowMs(), out)
  flushPublished()
  return { OUTCOME.claim.Ended, cjson.encode(out), 'failed' }
end
-- A lease that ran out (not one handed over at shutdown, which clears leaseOwner) means the
-- holder died or stalled. A run whose holders keep dying is most likely what kills them:
-- past the limit it fails here, instead of taking down one worker after another forever.
if recovered == 1 and rec.leaseOwner ~= '' then
  local lost = redis.call('HINCRBY', rk, 'expiredLeases', 1)
  rec.expiredLeases = lost
  if lost > O.maxRecoveries then
    -- RECOVERY_LIMIT is RUN_LIMIT_CODES.RECOVERY_LIMIT of src/lib/contract/runs.ts.
    local lastError = cjson.encode({ code = 'RECOVERY_LIMIT',
      message = 'the workers running this run were lost ' .. lost
        .. ' times (their leases ran out); MAX_RECOVERIES is ' .. O.maxRecoveries })
    local result = '{"answer":"","finishReason":"error","toolCallsSeen":0}'
    finishRun({ runId = runId, status = 'failed', write = newWrite('result', result, 'lastError', lastError), now = nowMs(),
      out = out, endData = '{"status":"failed","result":' .. result .. ',"error":' .. lastError .. '}' })
    flushPublished()
    return { OUTCOME.claim.Ended, cjson.encode(out), 'failed' }
  end
end
-- A dispatched run is not drained: the drain parks its runtime's dispatched runs when it
-- starts, and admission parks the rest while it lasts (transitions/drain.lua).

local fence = tonumber(rec.fence or '0') + 1
local attempt = tonumber(rec.attempt or '0')
local maxAttempts = tonumber(rec.maxAttempts or '1')
local w = newWrite()
-- Only the workers know their agents, so an agent's default attempts land at the first claim.
if attempt == 0 and rec.maxAttemptsSet ~= '1' and O.agentDefaults then
  local agentDefault = O.agentDefaults[rec.agent]
  if type(agentDefault) == 'number' then
    maxAttempts = agentDefault
    put(w, 'maxAttempts', maxAttempts)
  end
end
-- A run that was blocked and then resolved continues its interrupted attempt (the crash
-- that blocked it was no attempt of its own, like a recovery).
local resumed = st == 'dispatched' and rec.resumed == '1'
-- The attempt's first event goes first: a claim whose checks above needed no clock takes
-- its time from the event's id (nowMs in transitions/lib/call.lua).
-- Clients restart the answer text at every `attempt` event: a new holder replays it.
if recovered == 1 then
  addEvent(runId, 'attempt', cjson.encode({ attempt = attempt, maxAttempts = maxAttempts, recovered = true }))
elseif resumed then
  addEvent(runId, 'attempt', cjson.encode({ attempt = attempt, maxAttempts = maxAttempts, resumed = true }))
else
  attempt = attempt + 1
  addEvent(runId, 'attempt', cjson.encode({ attempt = attempt, maxAttempts = maxAttempts }))
end
local now = nowMs()
put(w, 'claimedAt', now)
if recovered == 1 then
  -- A holder that died held the run until its last heartbeat (its lease's start); its
  -- claimedAt is replaced by this claim's.
  local charged = chargedRunMs(rec.claimedAt, rec.runMs, lapsedAt - O.leaseMs)
  if charged then put(w, 'runMs', charged) end
end
if resumed then drop(w, 'resumed') end
local deadline = tonumber(rec.deadlineAt or '0')
if rec.timeoutMs and deadline == 0 then
  deadline = now + tonumber(rec.budgetLeft or rec.timeoutMs)
  put(w, 'deadlineAt', deadline)
  if rec.budgetLeft then drop(w, 'budgetLeft') end
  redis.call('ZADD', K.timers, deadline, 'timeout:' .. runId)
end
if not rec.startedAt and rec.startBy then redis.call('ZREM', K.timers, 'ttl:' .. runId) end
put(w, 'fence', fence)
put(w, 'leaseOwner', O.workerId)
if rec.leaseLapsed then drop(w, 'leaseLapsed') end
-- The run's entry in `leases` (its job's deadline until now) becomes its lease's deadline.
redis.call('ZADD', K.leases, now + O.leaseMs, runId)
local known = { createdAt = rec.createdAt, write = w }
-- The record write carries the log's new tail, so the attempt's events go before it.
local written
if recovered == 1 then
  local n = redis.call('HINCRBY', rk, 'recoveries', 1)
  rec.recoveries = n
  statusEvent(runId, { status = 'recovered', attempt = attempt, maxAttempts = maxAttempts, recoveries = n })
  tailInto(runId, w)
  writeRecord(rk, w)
  written = w.set
elseif resumed then
  statusEvent(runId, { status = 'running', attempt = attempt, maxAttempts = maxAttempts, resumed = true })
  tailInto(runId, w)
  written = setStatus({ runId = runId, runtime = runtime, from = st, to = 'running', now = now, known = known })
else
  put(w, 'attempt', attempt)
  if rec.retryAt then drop(w, 'retryAt') end
  if not rec.startedAt then put(w, 'startedAt', now) end
  statusEvent(runId, { status = 'running', attempt = attempt, maxAttempts = maxAttempts })
  tailInto(runId, w)
  written = setStatus({ runId = runId, runtime = runtime, from = st, to = 'running', now = now, known = known })
end
flushPublished()
-- The built-in store's history comes with the claim: an agent starts after one round trip.
-- LRANGE from the tail walks only the messages it returns, whatever the session's length,
-- and no more than historyBytes of them. The size of the history is what the submit saw
-- (`historyMem`) when the run was its session's head from its submit: only the head's own
-- finish adds to the history, so it is still that. Otherwise MEMORY USAGE tells it.
local reads = O.historyReads and tonumber(O.historyReads[rec.agent]) or 0
local messages, cut = {}, 0
if reads ~= 0 then
  local mk = sessionKey(rec.sessionId) .. ':messages'
  local size = tonumber(rec.historyMem or redis.call('MEMORY', 'USAGE', mk, 'SAMPLES', 0) or 0)
  if size > 0 then
    local newest, stop = historyWithin({ key = mk, from = -1, step = -1, limit = reads,
      maxBytes = O.historyBytes or size, first = false, size = size })
    for i = #newest, 1, -1 do messages[#messages + 1] = newest[i] end
    if stop == 'bytes' then cut = 1 end
  end
end
-- A run no worker ever started (no attempt before this claim) has no step results yet, but
-- for a re-run's, copied when it was made (transitions/submit.lua).
local steps = {}
if tonumber(rec.attempt or '0') > 0 or recovered == 1 or resumed or rec.rerunOf then steps = redis.call('HGETALL', rk .. ':steps') end
-- The record as HGETALL would give it now (this call's writes applied, numbers as text);
-- last, since everything above reads the record as it was.
for i = 1, #written, 2 do rec[written[i]] = written[i + 1] end
for _, f in ipairs(w.gone) do rec[f] = nil end
local record = {}
for f, v in pairs(rec) do
  record[#record + 1] = f
  record[#record + 1] = type(v) == 'number' and int(v) or v
end
return { OUTCOME.claim.Claimed, fence, attempt, recovered, record, steps, messages, deadline, now, cut }
