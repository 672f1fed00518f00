-- Sessions: the queue behind a head, steering messages that become turns, bounded history reads.
-- @uses runKey, sessionKey, admit, newWrite, put, knownTail, statusEvent, tailInto, setStatus, addEvent
-- @uses TERMINAL, scopeLimits, takeToken, flushPublished

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
local function advanceSession(a)
  local sessionId, runId, now, out, head, behind = a.sessionId, a.runId, a.now, a.out, a.head, a.behind
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
      admit({ runId = nextId, from = 'queued', now = now, out = out })
      return
    end
  end
end

-- ---- steering (docs/steering.md) ----
-- A steering message (transitions/submit.lua) waits in its run's `steer-pending` list; the session's
-- `steering` hash holds it by id: {id, runId, state, content, ...}. transitions/steer.lua delivers it
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
  setStatus({ runId = id, runtime = byName.runtime, to = 'queued', now = now, known = { createdAt = now, write = w } })
  redis.call('ZADD', call.base .. 'runs', now, id)
  redis.call('ZADD', sessionKey(byName.sessionId) .. ':runs', now, id)
  redis.call('ZADD', call.base .. 'agent:' .. byName.agent .. ':runs', now, id)
  redis.call('ZADD', call.base .. 'runtime:' .. byName.runtime .. ':runs', now, id)
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
local function historyWithin(a)
  local key, from, step, limit, maxBytes, first, size, firstRead = a.key, a.from, a.step, a.limit, a.maxBytes, a.first, a.size, a.firstRead
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

-- Steering (transitions/submit.lua, multitask `steer`): a session with an active run hands it the
-- message `steer` ({id, content, ttlMs}), to take at its next boundary; `fields`: the record
-- fields of the run it becomes if the active run ends without taking it (undeliverable).
-- Returns the submit's reply, or nil when the session has no active run (a run is made).
-- (The submit checked the history cap: the message joins the history where it is delivered.)
local function steerActive(steer, sk, fields, now)
  local K = call.K
  local active = redis.call('HGET', sk, 'active')
  local status = active and redis.call('HGET', runKey(active), 'status')
  if not status or TERMINAL[status] then return nil end
  -- A message takes a token of the scope's submit rate as a run does: it may become one, and
  -- what a tenant sends into a running turn is bounded as what it submits.
  local limits = scopeLimits()
  if limits.rate > 0 then
    local ok, waitMs = takeToken({ bucket = K.bucket, rate = limits.rate, burst = limits.burst, now = now })
    if not ok then return { CODE.RateLimited, waitMs } end
  end
  local m = { id = steer.id, runId = active, state = 'pending', content = steer.content, at = now, fields = fields }
  redis.call('HSET', K.steering, steer.id, cjson.encode(m))
  redis.call('PEXPIRE', K.steering, steer.ttlMs)
  redis.call('RPUSH', runKey(active) .. ':steer-pending', steer.id)
  redis.call('HSET', runKey(active), 'steered', 1)
  addEvent(active, 'steering', cjson.encode({ messageId = steer.id, outcome = 'pending' }))
  flushPublished()
  m.fields = nil
  return { OUTCOME.submit.Steered, active, cjson.encode(m), 1 }
end
