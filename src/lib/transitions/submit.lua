--[[ Accept a run: write its record, put it in its session's FIFO and, when it is the
  session's head and the scope has a free slot, dispatch it (outbox: the caller adds the
  BullMQ job; the sweeper repairs a crash in between). A run due later (runAt, delayMs) is
  `scheduled` instead: it joins its session when due (transitions/due.lua).
  KEYS  run, meta, ready, leases, timers, runs (scope listing), session, sessionRuns,
        agentRuns, runtimeRuns (the listing's indexes by agent and by runtime),
        steering (the session's steering messages; with multitask `steer` only),
        idem (absent = no idempotency key), bucket (the scope's submit rate limit),
        messages (the session's history); a re-run also: rerunOf (the record of the run it
        repeats), copyFrom (that run's steps), steps (the new run's steps), reruns (that
        run's index of its re-runs)
  O     multitask (enqueue | reject | interrupt | steer), idemTtlMs,
        runAt (epoch ms) or delayMs (absent = now)
        requestHash (digest of the request, kept with the idempotency key: the same key with
        another request is refused, not answered with the first run)
        limit {rate, burst}: the default submit rate (the scope's `limits` hash may set its
        own; rate 0 = none): a run made takes a token; a replay or a refusal takes none
        historyMax, turnBytes: a run whose message (turnBytes) would take the session's
        history (its MEMORY USAGE) past historyMax is refused
        copySteps (a re-run): the steps fields copied from copyFrom (src/lib/engine/operations/reruns.ts)
        rerunsKept (a re-run): how many re-runs the repeated run's record names (RERUNS_KEPT)
        warnings (absent = none): what the submit's caller was told (no worker serves the
        agent yet), carried by the run's first status event for readers of its stream
        message {id, content, ttlMs} (multitask `steer`): the steering message; kept ttlMs
        under its id in K.steering. With an active run in the session it is that run's to take
        (transitions/steer.lua) and no run is made; with none, the run is made as with `enqueue`.
  ARGV[2..] the new run's record (src/lib/transitions/record.ts, NewRunRecord), the one place it
        crosses: its fields as name/value pairs, in the order they are written, raw text (a
        large input is not decoded as JSON). Read once, at the top, into `run` by name (run.id,
        run.runtime, run.agent, run.ttlMs...), `fields` (the pairs) and `runBytes` (what it stores).
  Returns (fields below): Submitted (record: flat HGETALL) | Steered: a steering message sent now or
  before (runId: the run it went to) | a refusal, `value` being RateLimited's ms until a token, HistoryFull's
  history size, QueuedRunsLimit's runs not started, StorageLimit's bytes stored (retryAfterMs: 0 unknown)
  The scope's caps (scopeLimits in transitions/lib/limits.lua: its `limits` hash, else O.storage's defaults): runs
  queued or dispatched (`queued`), and bytes stored (`stored`, storedBytes in transitions/lib/storage.lua). ]]
-- @reply Submitted: runId, created, orders, run
-- @reply Steered: runId, message, sent
-- @reply SessionBusy
-- @reply Draining
-- @reply NotFound
-- @reply IdempotencyMismatch
-- @reply RateLimited: value
-- @reply HistoryFull: value
-- @reply QueuedRunsLimit: value
-- @reply StorageLimit: value, retryAfterMs
-- @uses nowMs, runKey, runtimeKey, takeToken, activeCount, scopeLimits, keyFull, lineWaiting, newWrite, put, knownTail
-- @uses unheard, steerActive, overCaps, recordRerun
-- @uses statusEvent, tailInto, setStartBy, setStatus, pinArtifacts, flushPublished, enqueueJob, int
-- @uses admit, joinQueue, cancelRun, chargeStorage
-- The new run, as it crossed (ARGV[2..]): its pairs, by name, and the bytes its record's fields take.
local fields, run, runBytes = {}, {}, 0
for i = 2, #ARGV, 2 do
  fields[i - 1], fields[i] = ARGV[i], ARGV[i + 1]
  run[ARGV[i]] = ARGV[i + 1]
  runBytes = runBytes + #ARGV[i] + #ARGV[i + 1]
end
local runId, rk, sk = run.id, K.run, K.session
local now = nowMs()

if K.idem then
  -- `<runId> <requestHash>`.
  local existing = redis.call('GET', K.idem)
  if existing then
    local id, hash = string.match(existing, '^(%S+) (%S+)$')
    if hash ~= O.requestHash then return { CODE.IdempotencyMismatch } end
    return { OUTCOME.submit.Submitted, id, 0, '[]', redis.call('HGETALL', runKey(id)) }
  end
end
-- A steering message sent again (same id) answers what became of the first: never a second.
local steer = O.multitask == 'steer' and O.message
if steer then
  local known = redis.call('HGET', K.steering, steer.id)
  if known then
    local m = cjson.decode(known)
    if m.content ~= steer.content then return { CODE.IdempotencyMismatch } end
    return { OUTCOME.submit.Steered, m.runId, known, 0 }
  end
end
if redis.call('EXISTS', runtimeKey('drain', run.runtime)) == 1 then return { CODE.Draining } end
-- A re-run of a run whose retention passed since the API read it would start without its steps.
if K.rerunOf and redis.call('EXISTS', K.rerunOf) == 0 then return { CODE.NotFound } end
-- The session's stored history is bounded: a turn that would take it past the cap is refused
-- here, before anything is written (the answer is not known yet; it is committed whatever
-- its size, and the next submit is refused).
local historyMem = tonumber(redis.call('MEMORY', 'USAGE', K.messages, 'SAMPLES', 0) or 0)
if O.historyMax and historyMem + O.turnBytes > O.historyMax then return { CODE.HistoryFull, historyMem } end

-- Steering: a session with an active run hands it the message, to take at its next boundary.
-- (Its history cap was checked above: the message joins the history where it is delivered.)
if steer then
  -- The fields of the run it becomes if the active run ends without taking it (undeliverable):
  -- the record's pairs as they crossed (`fields`, read at the top).
  local sent = steerActive(steer, sk, fields, now)
  if sent then return sent end
end

local due = O.runAt
if O.delayMs then due = now + O.delayMs end
local scheduled = due ~= nil and due > now
local limits = scopeLimits()
-- The scope's caps (overCaps), refused here before anything is written: its runs not started,
-- and its stored bytes (this run's: its record's fields as written below, `runBytes`).
local capped = overCaps(limits, scheduled, runBytes, now)
if capped then return capped end
-- A run due now becomes its session's head if the session has none, in the same command
-- that looks (a scheduled run joins its session when due, transitions/due.lua). `head`: it did.
local head = false
if not scheduled then
  head = redis.call('HSETNX', sk, 'active', runId) == 1
  if not head and O.multitask == 'reject' then return { CODE.SessionBusy } end
end
-- Last of the refusals, so only a run that is made spends a token; a refused run gives the
-- session back.
if limits.rate > 0 then
  local ok, waitMs = takeToken({ bucket = K.bucket, rate = limits.rate, burst = limits.burst, now = now })
  if not ok then
    if head then redis.call('HDEL', sk, 'active') end
    return { CODE.RateLimited, waitMs }
  end
end

local artifacts, agent, ckey, priority = run.artifactIds ~= nil, run.agent, run.concurrencyKey or false, run.priority or false
-- A run that is its session's head at once, with a scope slot free (for its key too) and no
-- run parked before it, is written dispatched: the record, indexes and counters that
-- queued-then-admitted leaves, with one status move instead of two. (Not drained: checked
-- above, in this same script.)
local dispatchNow = head and activeCount() < limits.slots and not keyFull(ckey or '') and not lineWaiting()
-- waited 0: the run never parked on waits, so its finish need not look for any.
-- behind 0: no run is queued behind it yet (queuedBehind in transitions/lib/sessions.lua).
local w = newWrite('createdAt', now, 'attempt', 0, 'fence', 0, 'dispatch', dispatchNow and 1 or 0, 'recoveries', 0,
  'waited', 0, 'behind', 0)
for i = 1, #fields, 2 do put(w, fields[i], fields[i + 1]) end
-- Counted now, listed with its expiry when it ends (finishRun).
put(w, 'storedBytes', runBytes)
chargeStorage(runBytes)
if K.rerunOf then recordRerun(runId, now) end
local status = (scheduled and 'scheduled') or (dispatchNow and 'dispatched') or 'queued'
-- A head's history changes only when it finishes: its claim needs not measure it again (claim.lua).
if head then put(w, 'historyMem', historyMem) end
-- A new run's log is empty. Its first event goes first, so the record write carries the tail.
knownTail(runId, '0')
unheard(runId)
if scheduled then
  put(w, 'runAt', due)
  statusEvent(runId, { status = 'scheduled', attempt = 0, runAt = due, warnings = O.warnings })
else
  -- Dispatched is internal: the API shows it as queued, and so does the stream.
  statusEvent(runId, { status = 'queued', attempt = 0, warnings = O.warnings })
end
tailInto(runId, w)
-- A scheduled run gets its startBy when it is due (transitions/due.lua).
if run.ttlMs and not scheduled then setStartBy(runId, tonumber(run.ttlMs), now, w) end
-- The record is written by setStatus's HSET, with its status.
local written = setStatus({ runId = runId, runtime = run.runtime, to = status, now = now,
  known = { createdAt = now, write = w } })
redis.call('ZADD', K.runs, now, runId)
redis.call('ZADD', K.sessionRuns, now, runId)
-- A run's agent and runtime never change, so they are indexed once, here (src/lib/engine/run-listing.ts).
redis.call('ZADD', K.agentRuns, now, runId)
redis.call('ZADD', K.runtimeRuns, now, runId)
if artifacts then pinArtifacts(rk) end
if K.idem then redis.call('SET', K.idem, runId .. ' ' .. O.requestHash, 'PX', O.idemTtlMs) end
-- A steering message that found no active run is this run's input, answered by its id from now on.
if steer then
  local m = { id = steer.id, runId = runId, state = 'turn', content = steer.content, at = now }
  redis.call('HSET', K.steering, steer.id, cjson.encode(m))
  redis.call('PEXPIRE', K.steering, steer.ttlMs)
end

local out = {}
if scheduled then
  redis.call('ZADD', K.timers, due, 'due:' .. runId)
  flushPublished()
  return { OUTCOME.submit.Submitted, runId, 1, '[]', redis.call('HGETALL', rk) }
end
if dispatchNow then
  call.active = redis.call('HINCRBY', K.meta, 'active', 1)
  if ckey then redis.call('HINCRBY', K.meta, 'key:' .. ckey, 1) end
  enqueueJob({ runId = runId, runtime = run.runtime, now = now, delay = 0, out = out, n = 1, agent = agent })
  flushPublished()
  -- The record is what setStatus wrote, numbers as HGETALL gives them: no read to send it back.
  local record = {}
  for i, v in ipairs(written) do record[i] = type(v) == 'number' and int(v) or v end
  return { OUTCOME.submit.Submitted, runId, 1, cjson.encode(out), record }
elseif head then
  -- Not drained: checked above, in this same script.
  admit({ runId = runId, from = 'queued', now = now, out = out, known = {
    runtime = run.runtime, createdAt = now, runAt = false, priority = priority, concurrencyKey = ckey, drained = false } })
else
  -- Behind the session's head. An interrupting run goes next, and cancelling the head then
  -- hands the session to it.
  local active = redis.call('HGET', sk, 'active')
  local interrupt = O.multitask == 'interrupt'
  joinQueue(sk, runId, active, interrupt)
  if interrupt then cancelRun(active, now, out) end
end
flushPublished()
-- The record comes back with the reply, so the API answers without reading it again.
return { OUTCOME.submit.Submitted, runId, 1, cjson.encode(out), redis.call('HGETALL', rk) }
