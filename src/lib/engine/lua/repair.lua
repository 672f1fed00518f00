--[[ Sweeper repair of one run, safe to run from every process at once.
  mode 'pending': the run was handed to BullMQ (score passed) and the sweeper found no live
    job for dispatch number O.dispatch: dispatch it again. With O.jobAlive the job exists:
    only push the deadline forward.
  mode 'lease': the run's lease deadline passed: dispatch a job so a worker takes it over.
  Stale index entries (the run moved on) are removed.
  KEYS  run, pending, leases
  O     runId, mode (pending | lease), dispatch (the number seen, mode pending), jobAlive (bool)
  Returns: {0, dispatches JSON} ]]
local runId, rk = O.runId, K.run
local now = nowMs()
local r = redis.call('HMGET', rk, 'status', 'dispatch', 'leaseLapsed', 'retryAt', 'runtime')
local st = r[1]
local out = {}
if O.mode == 'lease' then
  if st ~= 'running' then redis.call('ZREM', K.leases, runId); return { 0, '[]' } end
  if not r[3] then
    -- A heartbeat may have renewed it since the sweeper read the index.
    local deadline = tonumber(redis.call('ZSCORE', K.leases, runId) or '0')
    if deadline > now then return { 0, '[]' } end
    -- The score moves on to when to look again, so the lapsed deadline is kept in the
    -- record: the claim takes the run over by it (a heartbeat that still comes removes it).
    redis.call('HSET', rk, 'leaseLapsed', deadline)
  end
  -- Look again after the grace period; the new job's claim will take the lease over.
  redis.call('ZADD', K.leases, now + O.graceMs, runId)
  enqueueJob(runId, r[5], now, 0, out)
  return { 0, cjson.encode(out) }
end
if st ~= 'dispatched' and st ~= 'retrying' and st ~= 'running' then
  redis.call('ZREM', K.pending, runId)
  return { 0, '[]' }
end
if r[2] ~= tostring(O.dispatch) then return { 0, '[]' } end -- another process already repaired it
if O.jobAlive then
  redis.call('ZADD', K.pending, now + O.graceMs, runId)
  return { 0, '[]' }
end
local delay = 0
if st == 'retrying' then delay = math.max(0, tonumber(r[4] or '0') - now) end
enqueueJob(runId, r[5], now, delay, out)
return { 0, cjson.encode(out) }
