--[[ Shared helpers, prepended to every script that says `--@include lib`.

  Key layout mirrors src/lib/keys.ts: every key of a scope starts with `base`
  (`<prefix>:{<scope>}:`), so all keys touched here live in the scope's Cluster slot.

  Slots: a scope may have at most `maxActive` runs holding a slot (dispatched, running,
  retrying). Session heads beyond that wait, FIFO, in `<base>ready`.

  Error codes (mapped in src/lib/script-errors.ts):
    -1 NOT_FOUND  -2 LEASE_LOST  -3 NOT_RUNNABLE  -4 LEASE_HELD  -5 SESSION_BUSY
    -6 DRAINING   -8 STEP_NOT_BLOCKED ]]

local TERMINAL = { succeeded = true, failed = true, cancelled = true }
local HOLDS_SLOT = { dispatched = true, running = true, retrying = true }
-- Not started yet (the API shows both as queued): indexed per runtime in `waiting:<runtime>`,
-- so stats can tell the oldest one's age and a drain can cancel them without a scan.
local WAITING = { queued = true, dispatched = true }

local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function runKey(base, runId) return base .. 'run:' .. runId end

-- Collected events of this script call, published once at the end (one message per call)
-- as {prev, events}: `prev` is the id of the stream entry before this batch ('0' if none),
-- so a live reader can prove it missed no notification (else it re-reads the log).
local published = {}

local function addEvent(base, runId, maxLen, etype, data)
  local sk = runKey(base, runId) .. ':events'
  local batch = published[runId]
  if not batch then
    local last = redis.call('XREVRANGE', sk, '+', '-', 'COUNT', 1)
    batch = { prev = (last[1] and last[1][1]) or '0', events = {} }
    published[runId] = batch
  end
  local id = redis.call('XADD', sk, 'MAXLEN', '~', maxLen, '*', 'type', etype, 'data', data)
  batch.events[#batch.events + 1] = { id, etype, data }
  return id
end

local function flushPublished(base)
  for runId, batch in pairs(published) do
    redis.call('PUBLISH', runKey(base, runId) .. ':live', cjson.encode(batch))
  end
  published = {}
end

-- Moves a run to `to`, keeping the per-runtime status counters exact. Terminal counters are
-- cumulative (never decremented); the others count runs currently in that status.
local function setStatus(base, runId, runtime, from, to, now)
  redis.call('HSET', runKey(base, runId), 'status', to, 'updatedAt', now)
  local sk = base .. 'stats:' .. runtime
  if from and not TERMINAL[from] then redis.call('HINCRBY', sk, from, -1) end
  redis.call('HINCRBY', sk, to, 1)
  -- NX: a run parked again (dispatched -> queued) keeps the time it started to wait.
  if WAITING[to] then
    redis.call('ZADD', base .. 'waiting:' .. runtime, 'NX', now, runId)
  elseif from and WAITING[from] then
    redis.call('ZREM', base .. 'waiting:' .. runtime, runId)
  end
end

local function statusEvent(base, runId, maxLen, fields)
  return addEvent(base, runId, maxLen, 'status', cjson.encode(fields))
end

-- Hands a run to BullMQ through the outbox: bumps the dispatch number (the job id is
-- `<runId>-<dispatch>`) and records when a job must exist by; the caller adds the job.
local function enqueueJob(base, runId, runtime, now, delay, graceMs, out)
  local n = redis.call('HINCRBY', runKey(base, runId), 'dispatch', 1)
  redis.call('ZADD', base .. 'pending', now + delay + graceMs, runId)
  out[#out + 1] = { runId, runtime, n, delay }
end

local function activeCount(base)
  return tonumber(redis.call('HGET', base .. 'meta', 'active') or '0')
end

local function dispatchRun(base, runId, runtime, from, now, graceMs, maxLen, out)
  redis.call('HINCRBY', base .. 'meta', 'active', 1)
  setStatus(base, runId, runtime, from, 'dispatched', now)
  enqueueJob(base, runId, runtime, now, 0, graceMs, out)
end

-- A session head asks for a scope slot. Draining runtimes hold their runs; a full scope
-- parks them in the ready list. `from` is the run's current status.
local function admit(base, runId, from, now, maxActive, graceMs, maxLen, out)
  local runtime = redis.call('HGET', runKey(base, runId), 'runtime')
  if from ~= 'queued' then setStatus(base, runId, runtime, from, 'queued', now); from = 'queued' end
  if redis.call('EXISTS', base .. 'drain:' .. runtime) == 1 then
    redis.call('RPUSH', base .. 'held:' .. runtime, runId)
    return
  end
  if activeCount(base) >= maxActive then
    redis.call('RPUSH', base .. 'ready', runId)
    return
  end
  dispatchRun(base, runId, runtime, from, now, graceMs, maxLen, out)
end

-- Gives free scope slots to parked session heads, oldest first. Entries whose run was
-- cancelled or expired while parked are dropped.
local function fillSlots(base, now, maxActive, graceMs, maxLen, out)
  while activeCount(base) < maxActive do
    local runId = redis.call('LPOP', base .. 'ready')
    if not runId then return end
    local rk = runKey(base, runId)
    if redis.call('HGET', rk, 'status') == 'queued' then
      local runtime = redis.call('HGET', rk, 'runtime')
      if redis.call('EXISTS', base .. 'drain:' .. runtime) == 1 then
        redis.call('RPUSH', base .. 'held:' .. runtime, runId)
      else
        dispatchRun(base, runId, runtime, 'queued', now, graceMs, maxLen, out)
      end
    end
  end
end

-- The session's active run ended: the next queued run of the session becomes its head.
local function advanceSession(base, sessionId, runId, now, maxActive, graceMs, maxLen, out)
  local sk = base .. 'session:' .. sessionId
  if redis.call('HGET', sk, 'active') ~= runId then return end
  redis.call('HDEL', sk, 'active')
  while true do
    local nextId = redis.call('LPOP', sk .. ':queue')
    if not nextId then return end
    if redis.call('HGET', runKey(base, nextId), 'status') == 'queued' then
      redis.call('HSET', sk, 'active', nextId)
      admit(base, nextId, 'queued', now, maxActive, graceMs, maxLen, out)
      return
    end
  end
end

-- Input artifacts (src/lib/artifacts/redis-store.ts) live until RETENTION_MS after the last
-- run naming them ends. The run record's `artifactIds` (JSON array) names them; the submit
-- counts the run into each artifact's `runs` and clears its expiry, and the run's end counts
-- it out, setting the expiry again at zero. `artifactsPinned` makes the count-out happen once
-- per run. An id with no hash (a store other than Redis's) is left alone.
local function pinArtifacts(base, rk)
  local ids = redis.call('HGET', rk, 'artifactIds')
  if not ids then return end
  for _, id in ipairs(cjson.decode(ids)) do
    local ak = base .. 'artifact:' .. id
    if redis.call('EXISTS', ak) == 1 then
      redis.call('HINCRBY', ak, 'runs', 1)
      redis.call('PERSIST', ak)
    end
  end
  redis.call('HSET', rk, 'artifactsPinned', 1)
end

local function unpinArtifacts(base, rk, retention)
  if redis.call('HDEL', rk, 'artifactsPinned') == 0 then return end
  for _, id in ipairs(cjson.decode(redis.call('HGET', rk, 'artifactIds'))) do
    local ak = base .. 'artifact:' .. id
    if redis.call('EXISTS', ak) == 1 and redis.call('HINCRBY', ak, 'runs', -1) <= 0 then
      redis.call('PEXPIRE', ak, retention)
    end
  end
end

local function releaseSlot(base)
  if activeCount(base) > 0 then redis.call('HINCRBY', base .. 'meta', 'active', -1) end
end

-- Ends a run: terminal status, `end` event, lease and slot released, session advanced,
-- retention set. `fields` are extra run-record fields (result, lastError, ...).
local function finishRun(base, runId, status, fields, endData, now, maxActive, graceMs, maxLen, retention, out)
  local rk = runKey(base, runId)
  local from = redis.call('HGET', rk, 'status')
  local runtime = redis.call('HGET', rk, 'runtime')
  local sessionId = redis.call('HGET', rk, 'sessionId')
  setStatus(base, runId, runtime, from, status, now)
  redis.call('HSET', rk, 'finishedAt', now, 'leaseOwner', '', 'leaseExpiresAt', 0)
  if #fields > 0 then redis.call('HSET', rk, unpack(fields)) end
  redis.call('HDEL', rk, 'retryAt')
  redis.call('ZREM', base .. 'leases', runId)
  redis.call('ZREM', base .. 'pending', runId)
  addEvent(base, runId, maxLen, 'end', endData)
  if HOLDS_SLOT[from] then releaseSlot(base) end
  advanceSession(base, sessionId, runId, now, maxActive, graceMs, maxLen, out)
  fillSlots(base, now, maxActive, graceMs, maxLen, out)
  redis.call('PEXPIRE', rk, retention)
  redis.call('PEXPIRE', rk .. ':events', retention)
  redis.call('PEXPIRE', rk .. ':steps', retention)
  unpinArtifacts(base, rk, retention)
end

-- Checks that the caller still holds the run's lease: same fence, still running, not handed over.
local function fenced(rk, fence)
  local cur = redis.call('HMGET', rk, 'fence', 'status', 'leaseOwner')
  -- No owner: the holder handed the run over at shutdown (release); the fence moves on at
  -- the next claim, but the holder's right to write ended with the hand-over.
  return cur[1] == fence and cur[2] == 'running' and cur[3] ~= ''
end

-- Cancels a run in any non-terminal state. A running run is asked to stop (its worker
-- aborts ctx.signal, then finishes it as cancelled); every other state ends here.
-- Returns 0 (already terminal), 1 (cancelled now), 2 (cancel requested) or -1 (unknown).
local function cancelRun(base, runId, now, maxActive, graceMs, maxLen, retention, cancelChannel, out)
  local rk = runKey(base, runId)
  local st = redis.call('HGET', rk, 'status')
  if not st then return -1 end
  if TERMINAL[st] then return 0 end
  if st == 'running' then
    redis.call('HSET', rk, 'cancelRequested', 1)
    redis.call('PUBLISH', cancelChannel, rk)
    return 2
  end
  local sk = base .. 'session:' .. redis.call('HGET', rk, 'sessionId')
  if st == 'queued' and redis.call('HGET', sk, 'active') ~= runId then
    redis.call('LREM', sk .. ':queue', 0, runId)
  end
  local result = '{"answer":"","finishReason":"cancelled","toolCallsSeen":0}'
  finishRun(base, runId, 'cancelled', { 'result', result }, '{"status":"cancelled","result":' .. result .. '}',
    now, maxActive, graceMs, maxLen, retention, out)
  return 1
end
