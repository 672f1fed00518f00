--[[ Claim a run for a worker: a new attempt of a dispatched or retrying run, or the
  takeover of a running run whose lease expired (recovery). Bumps the fence either way.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] workerId  ARGV[4] lease ms
  ARGV[5] events max len  ARGV[6] maxActive  ARGV[7] dispatch grace ms  ARGV[8] retention ms
  Returns: {0, fence, attempt, recovered 0|1, record (flat), steps (flat)}
         | {1, dispatches JSON}      cancel was requested while no worker held it: cancelled now
         | {-1} NOT_FOUND | {-3, status} NOT_RUNNABLE | {-4, untilMs} LEASE_HELD (come back then)
         | {-6} DRAINING (run parked until the runtime resumes) ]]
--@include lib
local base, runId, workerId, leaseMs = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local maxLen, maxActive, graceMs, retention = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local rk = KEYS[1]
local now = nowMs()
local r = redis.call('HMGET', rk, 'status', 'leaseExpiresAt', 'retryAt', 'runtime', 'cancelRequested')
local st, runtime = r[1], r[4]
if not st then return { -1 } end

local recovered = 0
if st == 'running' then
  local until_ = tonumber(r[2] or '0')
  if until_ > now then return { -4, until_ } end
  recovered = 1
elseif st == 'retrying' then
  local at = tonumber(r[3] or '0')
  if at > now then return { -4, at } end
elseif st ~= 'dispatched' then
  return { -3, st }
end

local out = {}
if r[5] == '1' then
  local result = '{"answer":"","finishReason":"cancelled","toolCallsSeen":0}'
  finishRun(base, runId, 'cancelled', { 'result', result }, '{"status":"cancelled","result":' .. result .. '}',
    now, maxActive, graceMs, maxLen, retention, out)
  flushPublished(base)
  return { 1, cjson.encode(out) }
end
if st == 'dispatched' and redis.call('EXISTS', base .. 'drain:' .. runtime) == 1 then
  releaseSlot(base)
  setStatus(base, runId, runtime, st, 'queued', now)
  redis.call('ZREM', base .. 'pending', runId)
  redis.call('RPUSH', base .. 'held:' .. runtime, runId)
  return { -6 }
end

local fence = redis.call('HINCRBY', rk, 'fence', 1)
local attempt = tonumber(redis.call('HGET', rk, 'attempt') or '0')
local maxAttempts = tonumber(redis.call('HGET', rk, 'maxAttempts') or '1')
redis.call('HSET', rk, 'leaseOwner', workerId, 'leaseExpiresAt', now + leaseMs)
redis.call('ZADD', base .. 'leases', now + leaseMs, runId)
redis.call('ZREM', base .. 'pending', runId)
if recovered == 1 then
  local n = redis.call('HINCRBY', rk, 'recoveries', 1)
  -- Clients restart the answer text at every `attempt` event: the new holder replays it.
  addEvent(base, runId, maxLen, 'attempt', cjson.encode({ attempt = attempt, maxAttempts = maxAttempts, recovered = true }))
  statusEvent(base, runId, maxLen, { status = 'recovered', attempt = attempt, maxAttempts = maxAttempts, recoveries = n })
else
  attempt = attempt + 1
  redis.call('HSET', rk, 'attempt', attempt)
  redis.call('HDEL', rk, 'retryAt')
  if not redis.call('HGET', rk, 'startedAt') then redis.call('HSET', rk, 'startedAt', now) end
  setStatus(base, runId, runtime, st, 'running', now)
  addEvent(base, runId, maxLen, 'attempt', cjson.encode({ attempt = attempt, maxAttempts = maxAttempts }))
  statusEvent(base, runId, maxLen, { status = 'running', attempt = attempt, maxAttempts = maxAttempts })
end
flushPublished(base)
return { 0, fence, attempt, recovered, redis.call('HGETALL', rk), redis.call('HGETALL', rk .. ':steps') }
