-- Ending a run: finished, expired, timed out or cancelled.
-- @uses runKey, readFields, knownTail, undeliverable, nowMs, addEvent, tailDone, put, drop, setStatus
-- @uses unpark, HOLDS_SLOT, releaseSlot, advanceSession, fillSlots, scopeLimits, ledgerKey, unpinArtifacts
-- @uses dropAllWaits, newWrite, TERMINAL, sessionKey

-- Ends a run: terminal status, `end` event, lease and slot released, session advanced,
-- retention set. `write`: the record's other writes (result, lastError, ...; newWrite in transitions/lib/records.lua).
-- The record is read once and written with one HSET and one HDEL.
local FINISH_READ = { 'status', 'runtime', 'sessionId', 'createdAt', 'claimedAt', 'runMs', 'artifactsPinned',
  'retryAt', 'deadlineAt', 'budgetLeft', 'startBy', 'runAt', 'timeoutMs', 'appendedBatch', 'logTail', 'waited', 'behind',
  'concurrencyKey', 'storedBytes', 'steered' }

-- Fields a finished run keeps no more.
local FINISH_GONE = { 'retryAt', 'deadlineAt', 'budgetLeft' }
-- Fields whose presence means the run may have a deadline entry in `timers`.
local FINISH_TIMED = { 'deadlineAt', 'budgetLeft', 'startBy', 'runAt', 'timeoutMs' }
-- `rec` (optional): the record's FINISH_READ fields by name (readFields), when the caller read them already.
-- `held`: the caller holds the run's lease (transitions/finish.lua), so the run is its session's head.
-- `now` absent: the finish's time is its `end` event's (nowMs in transitions/lib/call.lua), logged first.
-- Returns how many steering messages it left pending (each now the session's next turn: undeliverable).
local function finishRun(a)
  local runId, status, w, endData, now, out, rec, held = a.runId, a.status, a.write, a.endData, a.now, a.out, a.rec, a.held
  local rk = runKey(runId)
  rec = rec or readFields(rk, FINISH_READ)
  knownTail(runId, rec.logTail)
  -- Steering messages it did not take go first: their outcomes belong before `end`. `steered`:
  -- one was ever sent to it (transitions/submit.lua), so other runs read nothing more.
  local behind = rec.behind
  local left = rec.steered == '1' and undeliverable(runId, rec.sessionId, status, now or nowMs()) or 0
  if left > 0 then behind = '1' end
  addEvent(runId, 'end', endData)
  tailDone(runId)
  now = now or nowMs()
  local from = rec.status
  put(w, 'finishedAt', now)
  put(w, 'leaseOwner', '')
  for _, f in ipairs(FINISH_GONE) do if rec[f] then drop(w, f) end end
  setStatus({
    runId = runId, runtime = rec.runtime, from = from, to = status, now = now,
    known = { createdAt = rec.createdAt, claimedAt = rec.claimedAt, runMs = rec.runMs or '0', write = w },
  })
  redis.call('ZREM', call.K.leases, runId)
  local key = rec.concurrencyKey or ''
  if from == 'queued' then unpark(runId, key) end
  if HOLDS_SLOT[from] then releaseSlot(key) end
  -- The session's next run asks for a slot before the parked runs are given the freed one:
  -- it is parked behind them if any may start (admit), so it takes its turn.
  advanceSession({ sessionId = rec.sessionId, runId = runId, now = now, out = out, head = held, behind = behind })
  fillSlots(now, out)
  -- The record, its log and its steps stay for the scope's retention (its `retentionMs` limit).
  local retention = scopeLimits().retention
  redis.call('PEXPIRE', rk, retention)
  redis.call('PEXPIRE', rk .. ':events', retention)
  redis.call('PEXPIRE', rk .. ':steps', retention)
  if rec.steered == '1' then redis.call('PEXPIRE', rk .. ':steer', retention) end
  -- Its input stays counted in the scope's storage until its record expires.
  if rec.storedBytes then redis.call('ZADD', ledgerKey(), now + retention, rec.storedBytes .. ' run:' .. runId) end
  unpinArtifacts(rk, rec.artifactsPinned and true or false)
  -- Whatever it still waited for or was timed by ends with it. A deadline entry exists only
  -- for a run that had waits, a ttlMs (startBy), a runAt or a timeoutMs. `waited` is 0 from
  -- the submit until the run first parks on waits.
  local timed = rec.waited == '1' and dropAllWaits(runId)
  for _, f in ipairs(FINISH_TIMED) do timed = timed or rec[f] end
  if timed then
    redis.call('ZREM', call.K.timers, 'wait:' .. runId, 'due:' .. runId, 'ttl:' .. runId, 'timeout:' .. runId)
  end
  return left
end

-- A run given ttlMs must start by `startBy`; the sweeper ends it `expired` otherwise. With
-- `w` (the buffer of the caller's next write of the record) the field goes there instead of an HSET.
local function setStartBy(runId, ttlMs, now, w)
  local startBy = now + ttlMs
  if w then
    put(w, 'startBy', startBy)
  else
    redis.call('HSET', runKey(runId), 'startBy', startBy)
  end
  redis.call('ZADD', call.K.timers, startBy, 'ttl:' .. runId)
end

-- How a run that never started (or is between attempts) ends here: nothing of an answer is at
-- hand, so its result is empty and its error says why.
local EXPIRED = {
  status = 'expired', result = '{"answer":"","finishReason":"expired","toolCallsSeen":0}',
  error = '{"code":"EXPIRED","message":"the run did not start within its ttlMs"}',
}
local TIMED_OUT = {
  status = 'failed', result = '{"answer":"","finishReason":"timeout","toolCallsSeen":0}',
  error = '{"code":"TIMEOUT","message":"the run used up its timeoutMs"}',
}

local function endUnanswered(runId, how, now, out)
  finishRun({
    runId = runId, status = how.status, write = newWrite('result', how.result, 'lastError', how.error),
    endData = '{"status":"' .. how.status .. '","result":' .. how.result .. ',"error":' .. how.error .. '}', now = now,
    out = out,
  })
end

local function expireRun(runId, now, out)
  endUnanswered(runId, EXPIRED, now, out)
end

-- Ends a run whose timeoutMs is used up while no worker runs it (between attempts, or at the
-- claim of a takeover): nothing of an answer is at hand here, the worker that held it streamed it.
local function timeOutRun(runId, now, out)
  endUnanswered(runId, TIMED_OUT, now, out)
end

local CANCELLED_RESULT = '{"answer":"","finishReason":"cancelled","toolCallsSeen":0}'

-- Cancels a run in any non-terminal state. A running run is asked to stop (its worker
-- aborts ctx.signal, then finishes it as cancelled); every other state ends here.
-- Returns OUTCOME.cancel's AlreadyFinished, Cancelled (now) or Requested, or CODE.NotFound.
local function cancelRun(runId, now, out)
  local rk = runKey(runId)
  local st = redis.call('HGET', rk, 'status')
  if not st then return CODE.NotFound end
  if TERMINAL[st] then return OUTCOME.cancel.AlreadyFinished end
  if st == 'running' then
    redis.call('HSET', rk, 'cancelRequested', 1)
    redis.call('PUBLISH', call.O.cancelChannel, rk)
    return OUTCOME.cancel.Requested
  end
  local sk = sessionKey(redis.call('HGET', rk, 'sessionId'))
  if st == 'queued' and redis.call('HGET', sk, 'active') ~= runId then
    redis.call('LREM', sk .. ':queue', 0, runId)
  end
  finishRun({
    runId = runId, status = 'cancelled', write = newWrite('result', CANCELLED_RESULT),
    endData = '{"status":"cancelled","result":' .. CANCELLED_RESULT .. '}', now = now, out = out,
  })
  return OUTCOME.cancel.Cancelled
end
