--[[ Accept a run: write its record, put it in its session's FIFO and, when it is the
  session's head and the scope has a free slot, dispatch it (outbox: the caller adds the
  BullMQ job; the sweeper repairs a crash in between). A run due later (runAt, delayMs) is
  `scheduled` instead: it joins its session when due (lua/due.lua).
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
        copySteps (a re-run): the steps fields copied from copyFrom (src/lib/engine/reruns.ts)
        rerunsKept (a re-run): how many re-runs the repeated run's record names (RERUNS_KEPT)
        warnings (absent = none): what the submit's caller was told (no worker serves the
        agent yet), carried by the run's first status event for readers of its stream
        message {id, content, ttlMs} (multitask `steer`): the steering message; kept ttlMs
        under its id in K.steering. With an active run in the session it is that run's to take
        (lua/steer.lua) and no run is made; with none, the run is made as with `enqueue`.
  ARGV[2..] the new run's record (src/lib/engine/record.ts, NewRunRecord), the one place it
        crosses: its fields as name/value pairs, in the order they are written, raw text (a
        large input is not decoded as JSON). Read once, at the top, into `run` by name (run.id,
        run.runtime, run.agent, run.ttlMs...), `fields` (the pairs) and `runBytes` (what it stores).
  Returns: {0, runId, created 1|0, dispatches JSON, record (flat HGETALL)}
         | {1, runId of the run it went to, message JSON, sent now 1|0} a steering message, sent now or before
         | {-5} SESSION_BUSY | {-6} DRAINING
         | {-12} IDEMPOTENCY_MISMATCH | {-13, ms until a token is there} RATE_LIMITED
         | {-14, the history's size} SESSION_HISTORY_FULL | {-15, runs not started} QUEUED_RUNS_LIMIT
         | {-16, bytes stored, ms until some may expire (0: unknown)} STORAGE_LIMIT
  The scope's caps (scopeLimits in lib.lua: its `limits` hash, else O.storage's defaults): runs
  queued or dispatched (`queued`), and bytes stored (`stored`, storedBytes in lib.lua). ]]
-- @uses nowMs, runKey, runtimeKey, takeToken, activeCount, scopeLimits, keyFull, lineWaiting, newWrite, put, knownTail
-- @uses unheard
-- @uses statusEvent, tailInto, setStartBy, setStatus, pinArtifacts, flushPublished, enqueueJob, int
-- @uses admit, joinQueue, cancelRun, storedBytes, storageRetryMs, chargeStorage, TERMINAL, addEvent
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
    if hash ~= O.requestHash then return { -12 } end
    return { 0, id, 0, '[]', redis.call('HGETALL', runKey(id)) }
  end
end
-- A steering message sent again (same id) answers what became of the first: never a second.
local steer = O.multitask == 'steer' and O.message
if steer then
  local known = redis.call('HGET', K.steering, steer.id)
  if known then
    local m = cjson.decode(known)
    if m.content ~= steer.content then return { -12 } end
    return { 1, m.runId, known, 0 }
  end
end
if redis.call('EXISTS', runtimeKey('drain', run.runtime)) == 1 then return { -6 } end
-- A re-run of a run whose retention passed since the API read it would start without its steps.
if K.rerunOf and redis.call('EXISTS', K.rerunOf) == 0 then return { -1 } end
-- The session's stored history is bounded: a turn that would take it past the cap is refused
-- here, before anything is written (the answer is not known yet; it is committed whatever
-- its size, and the next submit is refused).
local historyMem = tonumber(redis.call('MEMORY', 'USAGE', K.messages, 'SAMPLES', 0) or 0)
if O.historyMax and historyMem + O.turnBytes > O.historyMax then return { -14, historyMem } end

-- Steering: a session with an active run hands it the message, to take at its next boundary.
-- (Its history cap was checked above: the message joins the history where it is delivered.)
if steer then
  local active = redis.call('HGET', sk, 'active')
  local status = active and redis.call('HGET', runKey(active), 'status')
  if status and not TERMINAL[status] then
    -- A message takes a token of the scope's submit rate as a run does: it may become one, and
    -- what a tenant sends into a running turn is bounded as what it submits.
    local limits = scopeLimits()
    if limits.rate > 0 then
      local ok, waitMs = takeToken(K.bucket, limits.rate, limits.burst, now)
      if not ok then return { -13, waitMs } end
    end
    -- The fields of the run it becomes if the active run ends without taking it (lib.lua, undeliverable).
    local m = { id = steer.id, runId = active, state = 'pending', content = steer.content, at = now, fields = fields }
    redis.call('HSET', K.steering, steer.id, cjson.encode(m))
    redis.call('PEXPIRE', K.steering, steer.ttlMs)
    redis.call('RPUSH', runKey(active) .. ':steer-pending', steer.id)
    redis.call('HSET', runKey(active), 'steered', 1)
    addEvent(active, 'steering', cjson.encode({ messageId = steer.id, outcome = 'pending' }))
    flushPublished()
    m.fields = nil
    return { 1, active, cjson.encode(m), 1 }
  end
end

local due = O.runAt
if O.delayMs then due = now + O.delayMs end
local scheduled = due ~= nil and due > now
local limits = scopeLimits()
-- The scope's runs accepted and not started, queued or dispatched (both `queued` to the API),
-- are capped: one more is refused here, before anything is written. Scheduled runs have their
-- own cap (SCHEDULED_MAX_PER_SCOPE); waiting, blocked, running and retrying ones started.
if not scheduled and limits.queued > 0 then
  local queued = redis.call('ZCARD', BASE .. 'status:queued') + redis.call('ZCARD', BASE .. 'status:dispatched')
  if queued >= limits.queued then return { -15, queued } end
end
-- So are the bytes the scope stores: this run's are its record's fields as written below (runBytes).
if limits.stored > 0 then
  local held = storedBytes(now)
  if held + runBytes > limits.stored then return { -16, held, storageRetryMs(now) } end
end
-- A run due now becomes its session's head if the session has none, in the same command
-- that looks (a scheduled run joins its session when due, lua/due.lua). `head`: it did.
local head = false
if not scheduled then
  head = redis.call('HSETNX', sk, 'active', runId) == 1
  if not head and O.multitask == 'reject' then return { -5 } end
end
-- Last of the refusals, so only a run that is made spends a token; a refused run gives the
-- session back.
if limits.rate > 0 then
  local ok, waitMs = takeToken(K.bucket, limits.rate, limits.burst, now)
  if not ok then
    if head then redis.call('HDEL', sk, 'active') end
    return { -13, waitMs }
  end
end

local artifacts, agent, ckey, priority = run.artifactIds ~= nil, run.agent, run.concurrencyKey or false, run.priority or false
-- A run that is its session's head at once, with a scope slot free (for its key too) and no
-- run parked before it, is written dispatched: the record, indexes and counters that
-- queued-then-admitted leaves, with one status move instead of two. (Not drained: checked
-- above, in this same script.)
local dispatchNow = head and activeCount() < limits.slots and not keyFull(ckey or '') and not lineWaiting()
-- waited 0: the run never parked on waits, so its finish need not look for any.
-- behind 0: no run is queued behind it yet (queuedBehind in lib.lua).
local w = newWrite('createdAt', now, 'attempt', 0, 'fence', 0, 'dispatch', dispatchNow and 1 or 0, 'recoveries', 0,
  'waited', 0, 'behind', 0)
for i = 1, #fields, 2 do put(w, fields[i], fields[i + 1]) end
-- Counted now, listed with its expiry when it ends (finishRun).
put(w, 'storedBytes', runBytes)
chargeStorage(runBytes)
-- A re-run holds the copied step results before any claim can read its steps. The run it
-- repeats names its newest rerunsKept re-runs (`reruns`, space-separated ids, oldest first)
-- and counts them all (`rerunCount`); its index (K.reruns) holds every one, for the listing,
-- and lives as long as its record. A record an earlier version wrote names every re-run and
-- has no count or index: the ids it names go into the index here, once (an id the index holds
-- is not added again), so the listing finds them too.
if K.rerunOf then
  for _, f in ipairs(O.copySteps) do
    local v = redis.call('HGET', K.copyFrom, f)
    if v then redis.call('HSET', K.steps, f, v) end
  end
  local ids = {}
  for id in string.gmatch(redis.call('HGET', K.rerunOf, 'reruns') or '', '%S+') do
    ids[#ids + 1] = id
    if not redis.call('ZSCORE', K.reruns, id) then
      redis.call('ZADD', K.reruns, tonumber(redis.call('HGET', runKey(id), 'createdAt')) or now, id)
    end
  end
  local count = tonumber(redis.call('HGET', K.rerunOf, 'rerunCount')) or #ids
  ids[#ids + 1] = runId
  redis.call('ZADD', K.reruns, now, runId)
  local ttl = redis.call('PTTL', K.rerunOf)
  if ttl > 0 then redis.call('PEXPIRE', K.reruns, ttl) end
  local kept = table.concat(ids, ' ', math.max(1, #ids - O.rerunsKept + 1), #ids)
  redis.call('HSET', K.rerunOf, 'reruns', kept, 'rerunCount', count + 1)
end
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
-- A scheduled run gets its startBy when it is due (lua/due.lua).
if run.ttlMs and not scheduled then setStartBy(runId, tonumber(run.ttlMs), now, w) end
-- The record is written by setStatus's HSET, with its status.
local written = setStatus(runId, run.runtime, nil, status, now, { createdAt = now, write = w })
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
  return { 0, runId, 1, '[]', redis.call('HGETALL', rk) }
end
if dispatchNow then
  ACTIVE = redis.call('HINCRBY', K.meta, 'active', 1)
  if ckey then redis.call('HINCRBY', K.meta, 'key:' .. ckey, 1) end
  enqueueJob(runId, run.runtime, now, 0, out, 1, agent)
  flushPublished()
  -- The record is what setStatus wrote, numbers as HGETALL gives them: no read to send it back.
  local record = {}
  for i, v in ipairs(written) do record[i] = type(v) == 'number' and int(v) or v end
  return { 0, runId, 1, cjson.encode(out), record }
elseif head then
  -- Not drained: checked above, in this same script.
  admit(runId, 'queued', now, out,
    { runtime = run.runtime, createdAt = now, runAt = false, priority = priority, concurrencyKey = ckey, drained = false })
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
return { 0, runId, 1, cjson.encode(out), redis.call('HGETALL', rk) }
