-- A run's events: logged to its stream, published once per call on the scope's channel.
-- @uses runKey, put

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
  if id and not call.published[runId] then call.published[runId] = { prev = id, events = {} } end
end

-- The id of the last entry of the log `sk` ('0' when it has none): a notification's `prev`
-- when the run's record does not keep it.
local function lastEntryId(sk)
  local last = redis.call('XREVRANGE', sk, '+', '-', 'COUNT', 1)
  return (last[1] and last[1][1]) or '0'
end

-- Adds one event to the log `sk`, capped at the configured length; returns its id.
local function logEntry(sk, etype, data)
  return redis.call('XADD', sk, 'MAXLEN', '~', call.O.maxLen, '*', 'type', etype, 'data', data)
end

local function addEvent(runId, etype, data)
  local sk = runKey(runId) .. ':events'
  local batch = call.published[runId]
  if not batch then
    batch = { prev = lastEntryId(sk), events = {} }
    call.published[runId] = batch
  end
  local id = logEntry(sk, etype, data)
  batch.events[#batch.events + 1] = { id, etype, data }
  if not call.now then call.now = tonumber(string.match(id, '^%d+')) end
  return id
end

-- The id of the last event this call added to a run's log (nil if none).
local function lastAdded(runId)
  local batch = call.published[runId]
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
  call.published[runId].kept = last
end

-- A run that ended takes no more events: its tail is not kept.
local function tailDone(runId)
  if call.published[runId] then call.published[runId].kept = true end
end

-- A run this call made has no reader yet (nobody knows its id): its first events are only
-- logged, and a reader that subscribes later reads them from the log.
local function unheard(runId)
  if call.published[runId] then call.published[runId].unheard = true end
end

-- Publishes one notification of `runs`, [[runId, prev, [[id, type, data], ...]], ...] (at
-- most one entry a run), on the scope's channel (SPUBLISH with call.O.spublish: LIVE_PUBSUB),
-- or hands it back (call.O.deferPublish, below).
local function notify(runs)
  local message = cjson.encode({ runs = runs })
  if call.O.deferPublish then
    call.deferred = call.deferred or {}
    call.deferred[#call.deferred + 1] = message
  elseif call.O.spublish then
    -- Sharded: the channel is in the scope's slot, so the scope's node alone carries it.
    redis.call('SPUBLISH', call.base .. 'live', message)
  else
    redis.call('PUBLISH', call.base .. 'live', message)
  end
end

-- Publishes the runs' batches in one message, and writes each run's tail unless the caller's
-- HSET carried it.
local function flushPublished()
  local runs = {}
  for runId, batch in pairs(call.published) do
    local n = #batch.events
    if n > 0 then
      local last = batch.events[n][1]
      if batch.kept ~= true and batch.kept ~= last then redis.call('HSET', runKey(runId), 'logTail', last) end
      if not batch.unheard then runs[#runs + 1] = { runId, batch.prev, batch.events } end
    end
  end
  if #runs > 0 then notify(runs) end
  call.published = {}
end

-- call.O.deferPublish (REDIS_MIN_REPLICAS_ACK, src/lib/redis/replica-acks.ts): the call's notifications
-- are handed back instead of published, and the caller publishes them once replicas hold the
-- call's writes, so a live reader is never sent an event a failover could take back. Every
-- function's reply goes through here (scripts.ts): unchanged, or the marker, the reply and
-- the messages.
local function withDeferred(reply)
  if not call.deferred then return reply end
  -- A nil would end the list there (Lua's tables have no holes): false is Redis's nil too.
  if reply == nil then reply = false end
  return { 'baton:deferred', reply, unpack(call.deferred) }
end

local function statusEvent(runId, fields)
  return addEvent(runId, 'status', cjson.encode(fields))
end
