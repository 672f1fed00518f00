--[[ The transition helpers (status moves and their indexes, slots, sessions, waits, finishing,
  expiry, cancelling), after core.lua in the library; core.lua describes the calling
  convention, the keys and the error codes. ]]


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
-- terminal one's what moved in (src/lib/engine/runtime-counts.ts). Fields named by a status
-- alone also hold the counts kept before moves were counted, so those stay right.
-- `known` (optional): fields the caller read already (`createdAt`; `claimedAt`, false when
-- absent, with `runMs` for the time charge), and `write`, the caller's buffer of the record's
-- other writes (newWrite in core.lua), applied with the move: one HSET and at most one HDEL.
-- Returns the fields the HSET wrote, as name/value pairs.
local function setStatus(runId, runtime, from, to, now, known)
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
  if from then redis.call('ZREM', BASE .. 'status:' .. from, runId) end
  local createdAt = known and known.createdAt or redis.call('HGET', rk, 'createdAt')
  redis.call('ZADD', BASE .. 'status:' .. to, createdAt, runId)
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
  -- on (the baton_runs_waiting gauge); `waitKinds` (lua/wait.lua sets it) says which.
  if from == 'waiting' then
    local kinds = redis.call('HGET', runKey(runId), 'waitKinds')
    if kinds then
      for _, kind in ipairs(cjson.decode(kinds)) do redis.call('HINCRBY', sk, 'wait:' .. kind, -1) end
      redis.call('HDEL', runKey(runId), 'waitKinds')
    end
  end
  return fields
end

local function statusEvent(runId, fields)
  return addEvent(runId, 'status', cjson.encode(fields))
end

-- Hands a run to BullMQ through the outbox: bumps the dispatch number (the job id is
-- `<runId>-<dispatch>`) and records when a job must exist by, as the run's score in `leases`
-- (the index of runs handed out: to BullMQ until a claim, to a worker after); the caller
-- adds the job to the queue of the run's runtime and agent (only workers serving the agent
-- take from it).
-- `n` (optional): the dispatch number, when the caller wrote it already. `agent` (optional):
-- the run's agent, when the caller has it.
local function enqueueJob(runId, runtime, now, delay, out, n, agent)
  n = n or redis.call('HINCRBY', runKey(runId), 'dispatch', 1)
  agent = agent or redis.call('HGET', runKey(runId), 'agent')
  redis.call('ZADD', K.leases, now + delay + O.graceMs, runId)
  out[#out + 1] = { runId, runtime, n, delay, agent }
end

-- ---- admission: slots, concurrency keys, priority ----
-- A scope's runs that hold a slot (dispatched, running, retrying) are counted in `meta`
-- field `active`; those of a concurrency key (the submit's concurrencyKey) also in field
-- `key:<key>`. A session head that finds no slot (the scope at its slot limit, or its key at
-- maxActivePerKey) is parked:
--   ready:q:<key>  the key's parked runs (zset; runs without a key share the key '', so
--                  `ready:q:`), scored by when they became due less priority ×
--                  O.priorityStepMs: higher priority first, then oldest, and a run is never
--                  passed by one that became due more than (9 - its priority) steps after it
--   ready          keys with parked runs that may start (zset), in line: a freed slot goes to
--                  the key first in line, which then goes to the back, as does a key joining
--                  (`meta` field `turn` numbers the places): keys with work take turns, one
--                  run each, so a key waits at most one turn per other key with work
--   ready:capped   keys with parked runs at their maxActivePerKey (set): they rejoin the
--                  turns when a run of theirs gives its slot back
-- `meta` field `parked` counts the parked runs.
local READY_CAPPED = 'ready:capped'
local DEFAULT_PRIORITY = 5

local function readyQueue(key) return BASE .. 'ready:q:' .. key end

-- The scope's slots in use, read once per call into ACTIVE (core.lua) with its parked count
-- (PARKED): every change to either in a call goes through these helpers, which keep the
-- copies exact.
local function activeCount()
  if ACTIVE == nil then
    local m = readFields(K.meta, { 'active', 'parked' })
    ACTIVE = tonumber(m.active or '0')
    PARKED = PARKED or tonumber(m.parked or '0')
  end
  return ACTIVE
end

-- Whether runs parked before may start now (keys stand in line). The line is looked at only
-- when the scope has parked runs, or their count was not read in this call.
local function lineWaiting()
  activeCount()
  if PARKED == 0 then return false end
  return redis.call('EXISTS', K.ready) == 1
end

-- The scope's limits, read once per call into LIMIT (core.lua) from its `limits` hash (an
-- operator's, src/lib/tenancy/limits.ts; a field absent is the configured default in O):
-- `slots`, its maxActive, at most the live workers' slots (O.capacity) and lowered to its fair
-- share of them, O.level × its weight (never below 1), while scopes contend for them
-- (src/lib/engine/fair-share.ts);
-- `perKey`, its maxActivePerKey (0: none); `rate` and `burst`, its submit rate (rate 0: none);
-- `queued` and `stored`, its caps on runs not started and on stored bytes, and `forks` and
-- `forkBytes`, its fork rate a minute (each 0: none); `retention`, how long its finished runs stay.
local function scopeLimits()
  if LIMIT == nil then
    local l = readFields(BASE .. 'limits', { 'maxActive', 'maxActivePerKey', 'weight', 'submitRatePerSec', 'submitBurst',
      'maxQueuedRuns', 'maxStoredBytes', 'forksPerMinute', 'forkBytesPerMinute', 'retentionMs' })
    local slots = tonumber(l.maxActive) or O.maxActive
    -- More than the live workers' slots could only wait in BullMQ, ahead of other scopes' runs.
    if O.capacity and O.capacity < slots then slots = O.capacity end
    if O.level then
      local share = math.max(1, math.ceil(O.level * (tonumber(l.weight) or O.weight) - 1e-9))
      if share < slots then slots = share end
    end
    LIMIT = {
      slots = slots,
      perKey = tonumber(l.maxActivePerKey) or O.maxActivePerKey,
      rate = tonumber(l.submitRatePerSec) or O.limit.rate,
      burst = tonumber(l.submitBurst) or O.limit.burst,
      -- Storage (src/lib/tenancy/limits.ts): 0 in a default is none.
      queued = tonumber(l.maxQueuedRuns) or O.storage.queued,
      stored = tonumber(l.maxStoredBytes) or O.storage.bytes,
      forks = tonumber(l.forksPerMinute) or O.storage.forks,
      forkBytes = tonumber(l.forkBytesPerMinute) or O.storage.forkBytes,
      -- How long the scope's finished runs are kept (RETENTION_MS unless an operator set it).
      retention = tonumber(l.retentionMs) or O.retention,
    }
  end
  return LIMIT
end

-- Whether the concurrency key `key` has all the slots it may hold ('' has no cap).
local function keyFull(key)
  if key == '' then return false end
  local cap = scopeLimits().perKey
  return cap > 0 and tonumber(redis.call('HGET', K.meta, 'key:' .. key) or '0') >= cap
end

-- A key with parked runs joins the turns at the back of the line (a key in line keeps its place).
local function joinTurns(key)
  if redis.call('ZSCORE', K.ready, key) then return end
  redis.call('ZADD', K.ready, redis.call('HINCRBY', K.meta, 'turn', 1), key)
end

-- `since`: when the run became due (its runAt, else its submit).
local function park(runId, key, priority, since)
  if redis.call('ZADD', readyQueue(key), since - priority * O.priorityStepMs, runId) == 1 then
    PARKED = redis.call('HINCRBY', K.meta, 'parked', 1)
  end
  if keyFull(key) then redis.call('SADD', BASE .. READY_CAPPED, key) else joinTurns(key) end
end

-- A parked run that ends without starting (cancelled, expired) leaves at once.
local function unpark(runId, key)
  local q = readyQueue(key)
  if redis.call('ZREM', q, runId) == 0 then return end
  PARKED = redis.call('HINCRBY', K.meta, 'parked', -1)
  if redis.call('EXISTS', q) == 0 then
    redis.call('ZREM', K.ready, key)
    redis.call('SREM', BASE .. READY_CAPPED, key)
  end
end

local function dispatchRun(runId, runtime, from, now, out, known, key)
  ACTIVE = redis.call('HINCRBY', K.meta, 'active', 1)
  if key ~= '' then redis.call('HINCRBY', K.meta, 'key:' .. key, 1) end
  setStatus(runId, runtime, from, 'dispatched', now, known)
  enqueueJob(runId, runtime, now, 0, out)
end

-- Gives free slots to parked runs: one run per turn, to the key whose turn it is, the best
-- of its runs (priority, then age). A key found at its cap waits in ready:capped. Runs of a
-- drained runtime go to its held:<runtime> list instead.
local function fillSlots(now, out)
  if PARKED == 0 then return end
  while true do
    local key = redis.call('ZRANGE', K.ready, 0, 0)[1]
    if not key or activeCount() >= scopeLimits().slots then return end
    if keyFull(key) then
      redis.call('ZREM', K.ready, key)
      redis.call('SADD', BASE .. READY_CAPPED, key)
    else
      local q = readyQueue(key)
      local runId = redis.call('ZPOPMIN', q)[1]
      if runId then PARKED = redis.call('HINCRBY', K.meta, 'parked', -1) end
      if redis.call('EXISTS', q) == 0 then
        redis.call('ZREM', K.ready, key)
      else
        redis.call('ZADD', K.ready, redis.call('HINCRBY', K.meta, 'turn', 1), key)
      end
      local rec = runId and readFields(runKey(runId), { 'status', 'runtime', 'createdAt' })
      if rec and rec.status == 'queued' then
        if redis.call('EXISTS', runtimeKey('drain', rec.runtime)) == 1 then
          redis.call('RPUSH', runtimeKey('held', rec.runtime), runId)
        else
          dispatchRun(runId, rec.runtime, 'queued', now, out, { createdAt = rec.createdAt }, key)
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
local function admit(runId, from, now, out, known)
  local rec = known or readFields(runKey(runId), ADMIT_READ)
  local runtime = rec.runtime
  local statusKnown = { createdAt = rec.createdAt }
  if from ~= 'queued' then setStatus(runId, runtime, from, 'queued', now, statusKnown); from = 'queued' end
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
    dispatchRun(runId, runtime, from, now, out, statusKnown, key)
  end
end

-- A session's queue (`session:<id>:queue`) holds its runs behind the head. A run's `behind`
-- says whether any was queued while it was the head: 0 from its submit, 1 once one is, so
-- the head's end looks at the queue only then. Marks the session's head (`headId`) as having runs behind it.
local function queuedBehind(headId)
  redis.call('HSET', runKey(headId), 'behind', 1)
end

-- Queues a run behind its session's head (`headId`): next (`first`) or last.
local function joinQueue(sk, runId, headId, first)
  redis.call(first and 'LPUSH' or 'RPUSH', sk .. ':queue', runId)
  queuedBehind(headId)
end

-- The session's active run ended: the next queued run of the session becomes its head.
-- `head`: the caller knows the run is the head (it held the run's lease). `behind`: the run's
-- field as the caller read it.
local function advanceSession(sessionId, runId, now, out, head, behind)
  local sk = sessionKey(sessionId)
  if not head and redis.call('HGET', sk, 'active') ~= runId then return end
  redis.call('HDEL', sk, 'active')
  if behind ~= '1' then return end
  while true do
    local nextId = redis.call('LPOP', sk .. ':queue')
    if not nextId then return end
    if redis.call('HGET', runKey(nextId), 'status') == 'queued' then
      redis.call('HSET', sk, 'active', nextId)
      if redis.call('LLEN', sk .. ':queue') > 0 then queuedBehind(nextId) end
      admit(nextId, 'queued', now, out)
      return
    end
  end
end

-- Input artifacts (src/lib/artifacts/redis-store.ts) live until RETENTION_MS after the last
-- run naming them ends. The run record's `artifactIds` (JSON array) names them; the submit
-- counts the run into each artifact's `runs` and clears its expiry, and the run's end counts
-- it out, setting the expiry again at zero. `artifactsPinned` makes the count-out happen once
-- per run. An id with no hash (a store other than Redis's) is left alone.
local function pinArtifacts(rk)
  local ids = redis.call('HGET', rk, 'artifactIds')
  if not ids then return end
  for _, id in ipairs(cjson.decode(ids)) do
    local ak = BASE .. 'artifact:' .. id
    if redis.call('EXISTS', ak) == 1 then
      redis.call('HINCRBY', ak, 'runs', 1)
      redis.call('PERSIST', ak)
    end
  end
  redis.call('HSET', rk, 'artifactsPinned', 1)
end

-- `pinned` (optional): the record's artifactsPinned as the caller read it (false = absent).
local function unpinArtifacts(rk, pinned)
  if pinned == false then return end
  if redis.call('HDEL', rk, 'artifactsPinned') == 0 then return end
  for _, id in ipairs(cjson.decode(redis.call('HGET', rk, 'artifactIds'))) do
    local ak = BASE .. 'artifact:' .. id
    if redis.call('EXISTS', ak) == 1 and redis.call('HINCRBY', ak, 'runs', -1) <= 0 then
      redis.call('PEXPIRE', ak, O.retention)
    end
  end
end

-- A run gives its slot back (`key`: its concurrency key, '' for none). A key that was at its
-- cap with runs parked rejoins the turns. The caller fills the freed slot (fillSlots).
local function releaseSlot(key)
  -- Never below zero (the count was 0 when this script had not read it yet).
  if ACTIVE == nil or ACTIVE > 0 then
    ACTIVE = redis.call('HINCRBY', K.meta, 'active', -1)
    if ACTIVE < 0 then
      redis.call('HSET', K.meta, 'active', 0)
      ACTIVE = 0
    end
  end
  if key == '' then return end
  if redis.call('HINCRBY', K.meta, 'key:' .. key, -1) <= 0 then redis.call('HDEL', K.meta, 'key:' .. key) end
  if redis.call('SREM', BASE .. READY_CAPPED, key) == 1 then joinTurns(key) end
end

-- ---- waits (lua/wait.lua parks a run on them) ----
-- A run's pending waits live in `run:<id>:waits`: waitKey -> the wait as JSON text, made by
-- the worker and completed here by string concatenation, never decoded and encoded again
-- (cjson would turn an empty array of a schema or prompt into an object); and
-- `<waitKey>#token` -> the SHA-256 of its resume token, whose record `wait-token:<sha>`
-- lasts while the wait pends and RETENTION_MS after, so a second use of a token answers
-- WAIT_NOT_PENDING rather than "unknown". An answered wait's outcome is its step result.

-- The wait stops pending: its entry goes, its token's record starts to expire.
local function dropWait(runId, waitKey)
  local wk = waitsKey(runId)
  local h = redis.call('HGET', wk, waitKey .. '#token')
  if h then redis.call('PEXPIRE', BASE .. 'wait-token:' .. h, O.retention) end
  redis.call('HDEL', wk, waitKey, waitKey .. '#token')
end

-- Returns whether the run had any.
local function dropAllWaits(runId)
  local wk = waitsKey(runId)
  local flat = redis.call('HGETALL', wk)
  if #flat == 0 then return false end
  for i = 1, #flat, 2 do
    if string.sub(flat[i], -6) == '#token' then redis.call('PEXPIRE', BASE .. 'wait-token:' .. flat[i + 1], O.retention) end
  end
  redis.call('DEL', wk)
  return true
end

-- Stores a wait's outcome as its step result (`tail` is JSON text: `"v":<value>` and flags).
local function answerWait(runId, waitKey, since, now, tail)
  redis.call('HSET', runKey(runId) .. ':steps', waitKey,
    '{"startedAt":' .. int(since) .. ',"finishedAt":' .. int(now) .. ',' .. tail .. '}')
  dropWait(runId, waitKey)
end

-- Waits whose deadline is their end, not a timeout: a sleep, and a wait for the next day's
-- token budget (src/lib/engine/budgets.ts).
local ENDS_BY_ITSELF = { sleep = true, budget = true }

-- Pending waits whose deadline passed get their outcome: a sleep is over, any other wait
-- timed out (ctx.waitFor throws WaitTimeoutError). Returns the waits answered ({key, kind,
-- since} each) and the earliest deadline still ahead (nil when none).
local function expireWaits(runId, now)
  local flat = redis.call('HGETALL', waitsKey(runId))
  local done, nextAt = {}, nil
  for i = 1, #flat, 2 do
    local key = flat[i]
    if not string.find(key, '#', 1, true) then
      local w = cjson.decode(flat[i + 1])
      if w.expiresAt and w.expiresAt <= now then
        answerWait(runId, key, w.since, now, ENDS_BY_ITSELF[w.kind] and '"v":null' or '"v":null,"timedOut":true')
        done[#done + 1] = { key = key, kind = w.kind, since = w.since }
      elseif w.expiresAt and (not nextAt or w.expiresAt < nextAt) then
        nextAt = w.expiresAt
      end
    end
  end
  return done, nextAt
end

-- ---- a scope's stored bytes ----
-- `storage:bytes` counts what the scope stores of its own input: each run's record fields as
-- its submit wrote them (the record's `storedBytes`), each fork's copy of a history. The
-- ledger `storage` (zset) lists what holds them, `<bytes> <key>` (the key after BASE whose
-- existence says the bytes are still stored), scored by when to look at it again: a finished
-- run at the end of its retention (finishRun), a fork's partial copy at the end of its lease,
-- a forked history never (+inf: sessions are kept). An unfinished run is not listed: it ends
-- through finishRun, which lists it. Keys expire by themselves and a counter cannot see an
-- EXPIRE, so each call that checks the count first looks at up to STORAGE_PRUNE entries
-- whose time came: one whose key is gone leaves the ledger and its bytes the count; one still
-- there (a retention an operator raised) is looked at again when its key expires.
local STORAGE_PRUNE = 100

local function ledgerKey() return BASE .. 'storage' end

-- The scope's stored bytes, once the entries due by `now` were looked at (up to STORAGE_PRUNE),
-- and whether more may be due.
local function storedBytes(now)
  local ledger, counter = ledgerKey(), ledgerKey() .. ':bytes'
  local freed = 0
  local due = redis.call('ZRANGEBYSCORE', ledger, '-inf', now, 'LIMIT', 0, STORAGE_PRUNE)
  for _, member in ipairs(due) do
    local size, key = string.match(member, '^(%d+) (%S+)$')
    local ttl = redis.call('PTTL', BASE .. key)
    if ttl == -2 then
      redis.call('ZREM', ledger, member)
      freed = freed + tonumber(size)
    elseif ttl == -1 then
      redis.call('ZADD', ledger, now + O.retention, member)
    else
      redis.call('ZADD', ledger, now + ttl, member)
    end
  end
  local held = tonumber(redis.call('GET', counter) or '0')
  if freed > 0 then
    held = math.max(0, held - freed)
    if held > 0 then redis.call('SET', counter, held) else redis.call('DEL', counter) end
  end
  return held, #due == STORAGE_PRUNE
end

-- Ms until the ledger's first entry is due (0: none is, ever): a refusal's Retry-After.
local function storageRetryMs(now)
  local first = redis.call('ZRANGE', ledgerKey(), 0, 0, 'WITHSCORES')
  local at = first[2] and tonumber(first[2])
  if not at or at == math.huge then return 0 end
  return math.max(1, at - now)
end

-- Counts `bytes` stored under `key` (after BASE); `at` (optional): list them to look at then.
local function chargeStorage(bytes, key, at)
  redis.call('INCRBY', ledgerKey() .. ':bytes', bytes)
  if at then redis.call('ZADD', ledgerKey(), at, bytes .. ' ' .. key) end
end

-- Takes back a charge whose bytes were dropped at once (a fork that could not end whole).
local function dischargeStorage(bytes, key)
  redis.call('ZREM', ledgerKey(), bytes .. ' ' .. key)
  if redis.call('DECRBY', ledgerKey() .. ':bytes', bytes) <= 0 then redis.call('DEL', ledgerKey() .. ':bytes') end
end

-- Ends a run: terminal status, `end` event, lease and slot released, session advanced,
-- retention set. `w`: the record's other writes (result, lastError, ...; newWrite in core.lua).
-- The record is read once and written with one HSET and one HDEL.
local FINISH_READ = { 'status', 'runtime', 'sessionId', 'createdAt', 'claimedAt', 'runMs', 'artifactsPinned',
  'retryAt', 'deadlineAt', 'budgetLeft', 'startBy', 'runAt', 'timeoutMs', 'appendedBatch', 'logTail', 'waited', 'behind',
  'concurrencyKey', 'storedBytes', 'steered' }
-- ---- steering (docs/steering.md) ----
-- A steering message (lua/submit.lua) waits in its run's `steer-pending` list; the session's
-- `steering` hash holds it by id: {id, runId, state, content, ...}. lua/steer.lua delivers it
-- at a boundary of the run; a run that ends first hands each one still pending to the session
-- as its next turn, here, in the transition that ends it: delivered or a turn, never both.
local function steeringKey(sessionId) return sessionKey(sessionId) .. ':steering' end

-- A steering message that can no longer be delivered becomes a run of its own, made from the
-- record fields its submit carried (`fields`, name/value pairs, `id` among them): the run the
-- submit would have made with `enqueue`. Returns its id and runtime.
local function steeredTurn(m, now)
  local f = m.fields
  local w = newWrite('createdAt', now, 'attempt', 0, 'fence', 0, 'dispatch', 0, 'recoveries', 0, 'waited', 0, 'behind', 0)
  local byName = {}
  for i = 1, #f, 2 do
    put(w, f[i], f[i + 1])
    byName[f[i]] = f[i + 1]
  end
  local id = byName.id
  knownTail(id, '0')
  statusEvent(id, { status = 'queued', attempt = 0 })
  tailInto(id, w)
  setStatus(id, byName.runtime, nil, 'queued', now, { createdAt = now, write = w })
  redis.call('ZADD', BASE .. 'runs', now, id)
  redis.call('ZADD', sessionKey(byName.sessionId) .. ':runs', now, id)
  redis.call('ZADD', BASE .. 'agent:' .. byName.agent .. ':runs', now, id)
  redis.call('ZADD', BASE .. 'runtime:' .. byName.runtime .. ':runs', now, id)
  return id
end

-- The run `runId` ends with `status`: each steering message still pending is logged
-- `not-delivered` on its stream and becomes a run queued next in its session, in the order
-- they were sent. Returns how many did (the session then has runs behind the run).
local function undeliverable(runId, sessionId, status, now)
  local pk = runKey(runId) .. ':steer-pending'
  local ids = redis.call('LRANGE', pk, 0, -1)
  if #ids == 0 then return 0 end
  redis.call('DEL', pk)
  local hk = steeringKey(sessionId)
  local sk = sessionKey(sessionId)
  local made = {}
  for _, mid in ipairs(ids) do
    local raw = redis.call('HGET', hk, mid)
    -- Gone with the session's hash (kept a day after its last steering message): nothing to make.
    if raw then
      local m = cjson.decode(raw)
      local turn = steeredTurn(m, now)
      made[#made + 1] = turn
      m.fields = nil
      m.state = 'not-delivered'
      m.reason = status
      m.turnRunId = turn
      redis.call('HSET', hk, mid, cjson.encode(m))
      addEvent(runId, 'steering', cjson.encode({ messageId = mid, outcome = 'not-delivered', reason = status, turnRunId = turn }))
    end
  end
  -- LPUSH puts each in front of the one before: pushed last to first, the first sent goes first.
  for i = #made, 1, -1 do redis.call('LPUSH', sk .. ':queue', made[i]) end
  return #made
end

-- Fields a finished run keeps no more.
local FINISH_GONE = { 'retryAt', 'deadlineAt', 'budgetLeft' }
-- Fields whose presence means the run may have a deadline entry in `timers`.
local FINISH_TIMED = { 'deadlineAt', 'budgetLeft', 'startBy', 'runAt', 'timeoutMs' }
-- `rec` (optional): the record's FINISH_READ fields by name (readFields), when the caller read them already.
-- `held`: the caller holds the run's lease (lua/finish.lua), so the run is its session's head.
-- `now` absent: the finish's time is its `end` event's (nowMs in core.lua), logged first.
-- Returns how many steering messages it left pending (each now the session's next turn: undeliverable).
local function finishRun(runId, status, w, endData, now, out, rec, held)
  local rk = runKey(runId)
  rec = rec or readFields(rk, FINISH_READ)
  knownTail(runId, rec.logTail)
  -- Steering messages it did not take go first: their outcomes belong before `end`. `steered`:
  -- one was ever sent to it (lua/submit.lua), so other runs read nothing more.
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
  setStatus(runId, rec.runtime, from, status, now,
    { createdAt = rec.createdAt, claimedAt = rec.claimedAt, runMs = rec.runMs or '0', write = w })
  redis.call('ZREM', K.leases, runId)
  local key = rec.concurrencyKey or ''
  if from == 'queued' then unpark(runId, key) end
  if HOLDS_SLOT[from] then releaseSlot(key) end
  -- The session's next run asks for a slot before the parked runs are given the freed one:
  -- it is parked behind them if any may start (admit), so it takes its turn.
  advanceSession(rec.sessionId, runId, now, out, held, behind)
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
    redis.call('ZREM', K.timers, 'wait:' .. runId, 'due:' .. runId, 'ttl:' .. runId, 'timeout:' .. runId)
  end
  return left
end

-- A waiting run goes on: admitted again like a session head (it still owns its session), to
-- continue the attempt it was in. Its wait deadline entry goes; its next park sets it anew.
local function wakeRun(runId, wait, now, out)
  statusEvent(runId, { status = 'queued', wait = wait })
  local w = newWrite('resumed', 1)
  tailInto(runId, w)
  writeRecord(runKey(runId), w)
  redis.call('ZREM', K.timers, 'wait:' .. runId)
  admit(runId, 'waiting', now, out)
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
  redis.call('ZADD', K.timers, startBy, 'ttl:' .. runId)
end

local EXPIRED_RESULT = '{"answer":"","finishReason":"expired","toolCallsSeen":0}'
local EXPIRED_ERROR = '{"code":"EXPIRED","message":"the run did not start within its ttlMs"}'
local TIMEOUT_RESULT = '{"answer":"","finishReason":"timeout","toolCallsSeen":0}'
local TIMEOUT_ERROR = '{"code":"TIMEOUT","message":"the run used up its timeoutMs"}'

local function expireRun(runId, now, out)
  finishRun(runId, 'expired', newWrite('result', EXPIRED_RESULT, 'lastError', EXPIRED_ERROR),
    '{"status":"expired","result":' .. EXPIRED_RESULT .. ',"error":' .. EXPIRED_ERROR .. '}', now, out)
end

-- Ends a run whose timeoutMs is used up while no worker runs it (between attempts, or at the
-- claim of a takeover): nothing of an answer is at hand here, the worker that held it streamed it.
local function timeOutRun(runId, now, out)
  finishRun(runId, 'failed', newWrite('result', TIMEOUT_RESULT, 'lastError', TIMEOUT_ERROR),
    '{"status":"failed","result":' .. TIMEOUT_RESULT .. ',"error":' .. TIMEOUT_ERROR .. '}', now, out)
end

local CANCELLED_RESULT = '{"answer":"","finishReason":"cancelled","toolCallsSeen":0}'

-- Cancels a run in any non-terminal state. A running run is asked to stop (its worker
-- aborts ctx.signal, then finishes it as cancelled); every other state ends here.
-- Returns 0 (already terminal), 1 (cancelled now), 2 (cancel requested) or -1 (unknown).
local function cancelRun(runId, now, out)
  local rk = runKey(runId)
  local st = redis.call('HGET', rk, 'status')
  if not st then return -1 end
  if TERMINAL[st] then return 0 end
  if st == 'running' then
    redis.call('HSET', rk, 'cancelRequested', 1)
    redis.call('PUBLISH', O.cancelChannel, rk)
    return 2
  end
  local sk = sessionKey(redis.call('HGET', rk, 'sessionId'))
  if st == 'queued' and redis.call('HGET', sk, 'active') ~= runId then
    redis.call('LREM', sk .. ':queue', 0, runId)
  end
  finishRun(runId, 'cancelled', newWrite('result', CANCELLED_RESULT),
    '{"status":"cancelled","result":' .. CANCELLED_RESULT .. '}', now, out)
  return 1
end

-- The scope's submit rate limit: a token bucket (hash {tokens, at}) shared by every API
-- process. Takes one token if the bucket holds one; it refills at `rate` tokens per second
-- up to `burst`. A full bucket is the same as no key, so the key expires once it would have
-- refilled, and a refusal writes nothing.
-- `n` (optional, 1 if absent): how many tokens to take at once (the artifact upload bucket
-- counts bytes). Returns true | false, ms until the tokens are there.
local function takeToken(bucket, rate, burst, now, n)
  n = n or 1
  local b = readFields(bucket, { 'tokens', 'at' })
  local tokens = burst
  if b.tokens then
    tokens = math.min(burst, tonumber(b.tokens) + math.max(0, now - tonumber(b.at)) * rate / 1000)
  end
  if tokens < n then return false, math.ceil((n - tokens) * 1000 / rate) end
  tokens = tokens - n
  redis.call('HSET', bucket, 'tokens', tostring(tokens), 'at', now)
  redis.call('PEXPIRE', bucket, math.ceil((burst - tokens) * 1000 / rate) + 1000)
  return true
end

-- A session's history (a list of JSON messages) in bounded reads: the messages from index
-- `from` on, oldest first (`step` 1), or from `from` back, newest first (`step` -1, `from` -1
-- the newest), at most `limit` of them (< 0: no count limit) and `maxBytes` bytes in all. A
-- message that does not fit ends the read, except the first when `first` (a page always
-- makes progress). `size`: the list's memory when the caller knows it (MEMORY USAGE, which is
-- never less than its bytes): when it fits, one LRANGE reads what is asked. Otherwise the
-- list is read `firstRead` messages first (one if absent), then in chunks of at most 32
-- messages, each sized so the largest message seen so far would still fit, so what Lua holds
-- beyond maxBytes is about one chunk, never the list. (A first chunk of 8 read 8 messages of
-- 700 KB for a 1 MiB page of one: 5.6 MB copied for 0.7 MB answered, 9 ms of Redis against
-- 2.4 ms.)
-- Returns the messages in read order, and why it stopped: 'bytes', 'count' or 'end'.
local function historyWithin(key, from, step, limit, maxBytes, first, size, firstRead)
  local out, bytes, at, biggest = {}, 0, from, 1
  local chunk = firstRead or 1
  if size and size <= maxBytes then chunk = limit >= 0 and limit or -1 end
  while limit < 0 or #out < limit do
    local n = chunk
    if limit >= 0 and (n < 0 or n > limit - #out) then n = limit - #out end
    local lo, hi
    if n < 0 then
      if step > 0 then lo, hi = at, -1 else lo, hi = 0, at end
    elseif step > 0 then
      lo, hi = at, at + n - 1
    else
      -- Both negative: LRANGE clamps a start before the head, and then returns fewer.
      lo, hi = at - n + 1, at
    end
    local got = redis.call('LRANGE', key, lo, hi)
    local count = #got
    for j = 1, count do
      local v = step > 0 and got[j] or got[count - j + 1]
      if bytes + #v > maxBytes and not (first and #out == 0) then return out, 'bytes' end
      out[#out + 1] = v
      bytes = bytes + #v
      if #v > biggest then biggest = #v end
    end
    if n < 0 or count < n then return out, 'end' end
    at = at + step * count
    chunk = math.max(1, math.min(32, math.floor((maxBytes - bytes) / biggest)))
  end
  return out, 'count'
end
