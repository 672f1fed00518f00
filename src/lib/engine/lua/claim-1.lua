--[[ Claim a run for a worker: a new attempt of a dispatched or retrying run, or the
  takeover of a running run whose lease expired (recovery). Bumps the fence either way.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] workerId  ARGV[4] lease ms
  ARGV[5] events max len  ARGV[6] maxActive  ARGV[7] dispatch grace ms  ARGV[8] retention ms
  ARGV[9] this worker's agent defaults JSON {agentName: maxAttempts} ('' = none): the first
          claim of a run whose submit gave no maxAttempts takes its agent's default
  Returns: {0, fence, attempt, recovered 0|1, record (flat), steps (flat), session history (list)}
         | {1, dispatches JSON}      cancel was requested while no worker held it: cancelled now
         | {-1} NOT_FOUND | {-3, status} NOT_RUNNABLE | {-4, untilMs} LEASE_HELD (come back then)
         | {-6, dispatches JSON} DRAINING (run parked until the runtime resumes; its slot handed on) ]]
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
  -- The freed slot goes to the next waiting session head at once, not at the next finish.
  local parked = {}
  fillSlots(base, now, maxActive, graceMs, maxLen, parked)
  return { -6, cjson.encode(parked) }
end

local fence = redis.call('HINCRBY', rk, 'fence', 1)
local a = redis.call('HMGET', rk, 'attempt', 'maxAttempts', 'maxAttemptsSet', 'agent', 'resumed')
local attempt = tonumber(a[1] or '0')
local maxAttempts = tonumber(a[2] or '1')
-- Only the workers know their agents, so an agent's default attempts land at the first claim.
if attempt == 0 and a[3] ~= '1' and ARGV[9] and ARGV[9] ~= '' then
  local agentDefault = cjson.decode(ARGV[9])[a[4]]
  if type(agentDefault) == 'number' then
    maxAttempts = agentDefault
    redis.call('HSET', rk, 'maxAttempts', maxAttempts)
  end
end
-- A run that was blocked and then resolved continues its interrupted attempt (the crash
-- that blocked it was no attempt of its own, like a recovery).
local resumed = st == 'dispatched' and a[5] == '1'
if resumed then redis.call('HDEL', rk, 'resumed') end
redis.call('HSET', rk, 'leaseOwner', workerId, 'leaseExpiresAt', now + leaseMs)
redis.call('ZADD', base .. 'leases', now + leaseMs, runId)
redis.call('ZREM', base .. 'pending', runId)
if recovered == 1 then
  local n = redis.call('HINCRBY', rk, 'recoveries', 1)
  -- Clients restart the answer text at every `attempt` event: the new holder replays it.
  addEvent(base, runId, maxLen, 'attempt', cjson.encode({ attempt = attempt, maxAttempts = maxAttempts, recovered = true }))
  statusEvent(base, runId, maxLen, { status = 'recovered', attempt = attempt, maxAttempts = maxAttempts, recoveries = n })
elseif resumed then
  setStatus(base, runId, runtime, st, 'running', now)
  addEvent(base, runId, maxLen, 'attempt', cjson.encode({ attempt = attempt, maxAttempts = maxAttempts, resumed = true }))
  statusEvent(base, runId, maxLen, { status = 'running', attempt = attempt, maxAttempts = maxAttempts, resumed = true })
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
-- The built-in store's history comes with the claim: an agent starts after one round trip.
local history = base .. 'session:' .. redis.call('HGET', rk, 'sessionId') .. ':messages'
return { 0, fence, attempt, recovered, redis.call('HGETALL', rk), redis.call('HGETALL', rk .. ':steps'),
  redis.call('LRANGE', history, 0, -1) }
