--[[ Sweeper repair of one run, safe to run from every process at once.
  mode 'pending': the run was handed to BullMQ (score passed) and the sweeper found no live
    job for dispatch number ARGV[4]: dispatch it again. With ARGV[6] = 'alive' the job
    exists: only push the deadline forward.
  mode 'lease': the run's lease deadline passed: dispatch a job so a worker takes it over.
  Stale index entries (the run moved on) are removed.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] pending | lease  ARGV[4] dispatch number seen
  ARGV[5] dispatch grace ms  ARGV[6] alive | missing
  Returns: {0, dispatches JSON} ]]
--@include lib
local base, runId, rk, mode = ARGV[1], ARGV[2], KEYS[1], ARGV[3]
local graceMs = tonumber(ARGV[5])
local now = nowMs()
local r = redis.call('HMGET', rk, 'status', 'dispatch', 'leaseExpiresAt', 'retryAt', 'runtime')
local st = r[1]
local out = {}
if mode == 'lease' then
  if st ~= 'running' then redis.call('ZREM', base .. 'leases', runId); return { 0, '[]' } end
  if tonumber(r[3] or '0') > now then return { 0, '[]' } end
  -- Look again after the grace period; the new job's claim will take the lease over.
  redis.call('ZADD', base .. 'leases', now + graceMs, runId)
  enqueueJob(base, runId, r[5], now, 0, graceMs, out)
  return { 0, cjson.encode(out) }
end
if st ~= 'dispatched' and st ~= 'retrying' and st ~= 'running' then
  redis.call('ZREM', base .. 'pending', runId)
  return { 0, '[]' }
end
if r[2] ~= ARGV[4] then return { 0, '[]' } end -- another process already repaired it
if ARGV[6] == 'alive' then
  redis.call('ZADD', base .. 'pending', now + graceMs, runId)
  return { 0, '[]' }
end
local delay = 0
if st == 'retrying' then delay = math.max(0, tonumber(r[4] or '0') - now) end
enqueueJob(base, runId, r[5], now, delay, graceMs, out)
return { 0, cjson.encode(out) }
