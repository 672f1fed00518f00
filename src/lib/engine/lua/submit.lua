--[[ Accept a run: write its record, put it in its session's FIFO and, when it is the
  session's head and the scope has a free slot, dispatch it (outbox: the caller adds the
  BullMQ job; the sweeper repairs a crash in between).
  KEYS  run, meta, ready, pending, leases, runs (scope listing), session, sessionRuns,
        idem (absent = no idempotency key)
  O     runId, sessionId, runtime, multitask (enqueue | reject | interrupt), idemTtlMs,
        requestHash (digest of the request, kept with the idempotency key: the same key with
        another request is refused, not answered with the first run)
  ARGV[2..] record fields, name/value pairs
  Returns: {0, runId, created 1|0, dispatches JSON, record (flat HGETALL)} | {-5} SESSION_BUSY | {-6} DRAINING
         | {-12} IDEMPOTENCY_MISMATCH ]]
--@include lib
local runId, rk, sk = O.runId, K.run, K.session
local now = nowMs()

if K.idem then
  -- `<runId> <requestHash>`; a key stored before hashes were kept holds the run id alone.
  local existing = redis.call('GET', K.idem)
  if existing then
    local id, hash = string.match(existing, '^(%S+) ?(%S*)$')
    if hash ~= '' and hash ~= O.requestHash then return { -12 } end
    return { 0, id, 0, '[]', redis.call('HGETALL', runKey(id)) }
  end
end
if redis.call('EXISTS', runtimeKey('drain', O.runtime)) == 1 then return { -6 } end

local active = redis.call('HGET', sk, 'active')
if active and O.multitask == 'reject' then return { -5 } end

local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', rk, 'status', 'queued', 'createdAt', now, 'updatedAt', now,
  'attempt', 0, 'fence', 0, 'dispatch', 0, 'recoveries', 0, unpack(fields))
setStatus(runId, O.runtime, nil, 'queued', now)
redis.call('ZADD', K.runs, now, runId)
redis.call('ZADD', K.sessionRuns, now, runId)
pinArtifacts(rk)
if K.idem then redis.call('SET', K.idem, runId .. ' ' .. O.requestHash, 'PX', O.idemTtlMs) end
statusEvent(runId, { status = 'queued', attempt = 0 })

local out = {}
if not active then
  redis.call('HSET', sk, 'active', runId)
  admit(runId, 'queued', now, out)
elseif O.multitask == 'interrupt' then
  -- This run goes next; cancelling the active run then hands the session to it.
  redis.call('LPUSH', sk .. ':queue', runId)
  cancelRun(active, now, out)
else
  redis.call('RPUSH', sk .. ':queue', runId)
end
flushPublished()
-- The record comes back with the reply, so the API answers without reading it again.
return { 0, runId, 1, cjson.encode(out), redis.call('HGETALL', rk) }
