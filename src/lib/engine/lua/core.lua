--[[ The start of Baton's Redis Function library (src/lib/engine/scripts.ts assembles it):
  the per-call state and the helpers of the transitions that run most often; lib.lua adds
  the transition helpers, and each transition file (append.lua, claim.lua, ...) becomes one
  function of the library, `baton_<name>_v<version>_<digest>`, whose body is the file's text. The
  library is loaded into Redis once (FUNCTION LOAD), so a call runs its own body only: the
  helpers are not built again on every call, as they were when each call was a script that
  inlined them (about 12 µs of Redis CPU per call for lib's, measured against FCALL).

  Calling convention (src/lib/engine/transitions.ts is the only caller):
    KEYS    the keys the call names, in the order of O.k
    ARGV[1] options, one JSON object decoded here into O. Always present:
              O.k        names of KEYS, in order: K[name] is the key
              O.base     the scope's key prefix `<prefix>:{<scope>}:`
            and the limits scripts share: O.maxLen (events per run log), O.maxActive and
            O.maxActivePerKey (the defaults of a scope's slot limits), O.priorityStepMs,
            O.level (absent: no contention), O.capacity (live workers' slots; absent: none
            known), O.graceMs (dispatch grace), O.retention (ms a
            finished run stays), O.cancelChannel, O.storage (the defaults of a scope's
            storage caps and fork rate: queued, bytes, forks, forkBytes). Each script's header lists the rest.
    ARGV[2..] payload lists some scripts take (event pairs, record fields): see their headers.

  Keys: everything a script touches lives in the scope's Cluster slot. The scope's own keys
  (meta, ready, leases, ...) and the keys of the run a call is about arrive in KEYS.
  Derived here, because only a record read inside the script says which: the keys of other
  runs a transition moves (the next head of a session, parked runs handed a free slot),
  the per-runtime keys of a run's runtime (stats:<rt>, waiting:<rt>, drain:<rt>, held:<rt>)
  a run's session keys, the artifacts a run names (`artifact:<id>`) and the records of a run's
  resume tokens (`wait-token:<sha256>`). A run's log, steps, waits and live channel are its
  record key plus a fixed suffix (:events, :steps, :waits); the scope's live channel is BASE .. 'live'.
  All of them follow src/lib/keys.ts.

  Slots: a scope may have at most its slot limit of runs holding a slot (dispatched, running,
  retrying): its `maxActive` (the `limits` hash an operator sets, else O.maxActive), lowered
  to its fair share of the workers' slots while scopes contend for them (O.level; lib.lua,
  src/lib/engine/fair-share.ts). Session heads beyond that are parked by concurrency key
  and priority (the admission section of lib.lua).

  Error codes (the ScriptCode enum in src/lib/engine/script-codes.ts):
    -1 NOT_FOUND  -2 LEASE_LOST  -3 NOT_RUNNABLE  -4 LEASE_HELD  -5 SESSION_BUSY
    -6 DRAINING   -8 STEP_NOT_BLOCKED  -9 WAIT_NOT_PENDING  -12 IDEMPOTENCY_MISMATCH
    -13 RATE_LIMITED  -14 SESSION_HISTORY_FULL  -15 QUEUED_RUNS_LIMIT  -16 STORAGE_LIMIT ]]

-- Per-call state: begin() sets it at the start of every call, since the library's locals
-- outlive a call. ARGV is the call's arguments, as a script has them (its keys are K's);
-- O the options, K the keys by name, BASE the scope's key prefix; `published` collects the
-- call's events (flushPublished below); ACTIVE and PARKED are the scope's slot count and
-- parked count once read, LIMIT its admission limits once read (all lib.lua). NOW the call's
-- time once known (nowMs below).
local ARGV, O, K, BASE, published, ACTIVE, PARKED, LIMIT, NOW, DEFERRED
local function begin(keys, args)
  ARGV = args
  O = cjson.decode(args[1])
  K = {}
  for i, name in ipairs(O.k) do K[name] = keys[i] end
  BASE = O.base
  published = {}
  ACTIVE = nil
  PARKED = nil
  LIMIT = nil
  NOW = nil
  DEFERRED = nil
end

local TERMINAL = { succeeded = true, failed = true, cancelled = true, expired = true }
local HOLDS_SLOT = { dispatched = true, running = true, retrying = true }
-- Not started yet (the API shows both as queued): indexed per runtime in `waiting:<runtime>`,
-- so stats can tell the oldest one's age and a drain can cancel them without a scan.
local WAITING = { queued = true, dispatched = true }

-- The call's time, epoch ms, the same for the whole call. Redis's clock: TIME, unless the
-- call logged an event before it asked. An event's id is `<ms>-<seq>`, stamped by the same
-- clock (or, should the log's last entry be later, that entry's ms), so the first event's
-- id gives the time without the TIME command (addEvent sets NOW).
local function nowMs()
  if not NOW then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return NOW
end

local function runKey(runId) return BASE .. 'run:' .. runId end
local function waitsKey(runId) return BASE .. 'run:' .. runId .. ':waits' end
-- Epoch ms as JSON text: tostring of a large number may use an exponent.
local function int(n) return string.format('%d', n) end
local function sessionKey(sessionId) return BASE .. 'session:' .. sessionId end
local function runtimeKey(kind, runtime) return BASE .. kind .. ':' .. runtime end

-- A record's writes, buffered so a call writes each record once: newWrite(name, value, ...)
-- starts a buffer, put() and drop() add a field to set or to delete, and writeRecord() applies
-- it with one HSET and one HDEL (each only when it has fields). setStatus (lib.lua) applies
-- a buffer with its status move, in the same HSET.
local function newWrite(...)
  return { set = { ... }, gone = {} }
end

local function put(w, name, value)
  w.set[#w.set + 1] = name
  w.set[#w.set + 1] = value
end

local function drop(w, name)
  w.gone[#w.gone + 1] = name
end

local function writeRecord(rk, w)
  if #w.set > 0 then redis.call('HSET', rk, unpack(w.set)) end
  if #w.gone > 0 then redis.call('HDEL', rk, unpack(w.gone)) end
end

-- `published`: the events of this call, published once at the end: one message per call on
-- the scope's channel (`live`), {runs: [[runId, prev, events], ...]}, whatever number of runs
-- the call wrote to. `prev` is the id of the stream entry before a run's batch ('0' if none),
-- so a live reader can prove it missed no notification (else it re-reads the log). API
-- processes subscribe to the channel of each scope they follow a run of, and route by run
-- (src/lib/streams/hub.ts): one message and one socket write per call and subscriber, not
-- one per run written to.

-- Where a run's log ends, kept in its record as `logTail` (the id of the last entry): every
-- call that adds events to a run's log writes it, so a script that reads the record anyway
-- knows the `prev` of its notification without reading the log. knownTail hands it over
-- ('0' for a run this call made); a record without it (written before it was kept) has its
-- log read by the first addEvent.
local function knownTail(runId, id)
  if id and not published[runId] then published[runId] = { prev = id, events = {} } end
end

local function addEvent(runId, etype, data)
  local sk = runKey(runId) .. ':events'
  local batch = published[runId]
  if not batch then
    local last = redis.call('XREVRANGE', sk, '+', '-', 'COUNT', 1)
    batch = { prev = (last[1] and last[1][1]) or '0', events = {} }
    published[runId] = batch
  end
  local id = redis.call('XADD', sk, 'MAXLEN', '~', O.maxLen, '*', 'type', etype, 'data', data)
  batch.events[#batch.events + 1] = { id, etype, data }
  if not NOW then NOW = tonumber(string.match(id, '^%d+')) end
  return id
end

-- The id of the last event this call added to a run's log (nil if none).
local function lastAdded(runId)
  local batch = published[runId]
  local n = batch and #batch.events or 0
  if n == 0 then return nil end
  return batch.events[n][1]
end

-- Adds `logTail` for the events this call added to a run's log so far to `w`, the buffer of
-- the caller's next write of that run's record; flushPublished writes it only if events were
-- added after.
local function tailInto(runId, w)
  local last = lastAdded(runId)
  if not last then return end
  put(w, 'logTail', last)
  published[runId].kept = last
end

-- A run that ended takes no more events: its tail is not kept.
local function tailDone(runId)
  if published[runId] then published[runId].kept = true end
end

-- A run this call made has no reader yet (nobody knows its id): its first events are only
-- logged, and a reader that subscribes later reads them from the log.
local function unheard(runId)
  if published[runId] then published[runId].unheard = true end
end

-- Publishes the runs' batches in one message, and writes each run's tail unless the caller's
-- HSET carried it.
local function flushPublished()
  local runs = {}
  for runId, batch in pairs(published) do
    local n = #batch.events
    if n > 0 then
      local last = batch.events[n][1]
      if batch.kept ~= true and batch.kept ~= last then redis.call('HSET', runKey(runId), 'logTail', last) end
      if not batch.unheard then runs[#runs + 1] = { runId, batch.prev, batch.events } end
    end
  end
  if #runs > 0 then
    local message = cjson.encode({ runs = runs })
    if O.deferPublish then
      DEFERRED = DEFERRED or {}
      DEFERRED[#DEFERRED + 1] = message
    else
      redis.call('PUBLISH', BASE .. 'live', message)
    end
  end
  published = {}
end

-- O.deferPublish (REDIS_MIN_REPLICAS_ACK, src/lib/replica-acks.ts): the call's notifications
-- are handed back instead of published, and the caller publishes them once replicas hold the
-- call's writes, so a live reader is never sent an event a failover could take back. Every
-- function's reply goes through here (scripts.ts): unchanged, or the marker, the reply and
-- the messages.
local function withDeferred(reply)
  if not DEFERRED then return reply end
  -- A nil would end the list there (Lua's tables have no holes): false is Redis's nil too.
  if reply == nil then reply = false end
  return { 'baton:deferred', reply, unpack(DEFERRED) }
end

-- Whether the writer's batch `batch` of this fence is to be applied: a batch number is applied
-- once (`appendedBatch` = `<fence>:<n>`, the last one applied), so a batch whose reply was
-- lost and that arrives again is not written twice. Marks it applied by adding the field to
-- `w`, the buffer of the caller's next write of the record.
local function newBatch(fence, batch, applied, w)
  if applied then
    local f, n = string.match(applied, '^(%d+):(%d+)$')
    if f == tostring(fence) and tonumber(n) >= batch then return false end
  end
  put(w, 'appendedBatch', tostring(fence) .. ':' .. batch)
  return true
end

-- A hash's fields by name, in one read (HMGET): each value under its field's name, false when
-- the field is absent. The one way the library reads several fields of a record, so no script
-- reads a record by position (scripts/check-lua.mjs fails on any other HMGET).
local function readFields(key, names)
  local values = redis.call('HMGET', key, unpack(names))
  local rec = {}
  for i, name in ipairs(names) do rec[name] = values[i] end
  return rec
end

-- The fields every fence check reads (fenced below); a caller's own follow them in the same read.
local FENCE_READ = { 'fence', 'status', 'leaseOwner' }

-- Checks that the caller still holds the run's lease: same fence, still running, not handed
-- over. `names` (optional): more fields to read in the same HMGET. Returns whether it holds,
-- and the record's fields read, by name (the fence's three among them).
local function fenced(rk, fence, names)
  local read = { unpack(FENCE_READ) }
  for _, name in ipairs(names or {}) do read[#read + 1] = name end
  local rec = readFields(rk, read)
  -- No owner: the holder handed the run over at shutdown (release); the fence moves on at
  -- the next claim, but the holder's right to write ended with the hand-over.
  return rec.fence == tostring(fence) and rec.status == 'running' and rec.leaseOwner ~= '', rec
end
