--[[ Accept a run: write its record, put it in its session's FIFO and, when it is the
  session's head and the scope has a free slot, dispatch it (outbox: the caller adds the
  BullMQ job; the sweeper repairs a crash in between).
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] sessionId  ARGV[4] runtime
  ARGV[5] maxActive   ARGV[6] dispatch grace ms  ARGV[7] events max len
  ARGV[8] idempotency key ('' = none)  ARGV[9] idempotency ttl ms
  ARGV[10] multitask: enqueue | reject | interrupt   ARGV[11] cancel channel
  ARGV[12] retention ms   ARGV[13..] record fields, name/value pairs
  Returns: {0, runId, created 1|0, dispatches JSON, record (flat HGETALL)} | {-5} SESSION_BUSY | {-6} DRAINING ]]
--@include lib
local base, runId, sessionId, runtime = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local maxActive, graceMs, maxLen = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local idemKey, idemTtl, multitask = ARGV[8], tonumber(ARGV[9]), ARGV[10]
local now = nowMs()

if idemKey ~= '' then
  local existing = redis.call('GET', base .. 'idem:' .. idemKey)
  if existing then return { 0, existing, 0, '[]', redis.call('HGETALL', base .. 'run:' .. existing) } end
end
if redis.call('EXISTS', base .. 'drain:' .. runtime) == 1 then return { -6 } end

local sk = base .. 'session:' .. sessionId
local active = redis.call('HGET', sk, 'active')
if active and multitask == 'reject' then return { -5 } end

local fields = {}
for i = 13, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], 'status', 'queued', 'createdAt', now, 'updatedAt', now,
  'attempt', 0, 'fence', 0, 'dispatch', 0, 'recoveries', 0, unpack(fields))
setStatus(base, runId, runtime, nil, 'queued', now)
redis.call('ZADD', base .. 'runs', now, runId)
redis.call('ZADD', sk .. ':runs', now, runId)
pinArtifacts(base, KEYS[1])
if idemKey ~= '' then redis.call('SET', base .. 'idem:' .. idemKey, runId, 'PX', idemTtl) end
statusEvent(base, runId, maxLen, { status = 'queued', attempt = 0 })

local out = {}
if not active then
  redis.call('HSET', sk, 'active', runId)
  admit(base, runId, 'queued', now, maxActive, graceMs, maxLen, out)
elseif multitask == 'interrupt' then
  -- This run goes next; cancelling the active run then hands the session to it.
  redis.call('LPUSH', sk .. ':queue', runId)
  cancelRun(base, active, now, maxActive, graceMs, maxLen, tonumber(ARGV[12]), ARGV[11], out)
else
  redis.call('RPUSH', sk .. ':queue', runId)
end
flushPublished(base)
-- The record comes back with the reply, so the API answers without reading it again.
return { 0, runId, 1, cjson.encode(out), redis.call('HGETALL', KEYS[1]) }
