--[[ Sweeper repair of one run whose score in `leases` passed, safe to run from every process
  at once: each re-checks the run and its score here, and a repair moves the score on, so of
  the processes that read the index together one repairs.
  running: its lease ran out: a job is dispatched, whose claim takes the run over.
  dispatched or retrying: it was handed to BullMQ and must have a job by now. The sweeper
    looked up the job of dispatch number O.dispatch: alive (O.jobAlive), only the deadline
    moves on; missing, the run is dispatched again. Without O.dispatch (the sweeper saw the
    run in another state) nothing is done: the next sweep looks again.
  any other status: the entry is stale, and goes.
  KEYS  run, leases
  O     runId, dispatch (the number the sweeper looked up), jobAlive (bool)
  Returns: {Checked, dispatches JSON} ]]
-- @reply Checked: orders
-- @uses nowMs, readFields, enqueueJob
local runId, rk = O.runId, K.run
local now = nowMs()
local rec = readFields(rk, { 'status', 'dispatch', 'leaseLapsed', 'retryAt', 'runtime' })
local st = rec.status
local out = {}
if st ~= 'running' and st ~= 'dispatched' and st ~= 'retrying' then
  redis.call('ZREM', K.leases, runId)
  return { OUTCOME.repair.Checked, '[]' }
end
-- Not due any more: a heartbeat or a claim moved it, or another process repaired it since
-- the sweeper read the index (a repair moves the score on to when to look again).
local deadline = tonumber(redis.call('ZSCORE', K.leases, runId) or '0')
if deadline > now then return { OUTCOME.repair.Checked, '[]' } end
if st == 'running' then
  -- The score moves on (enqueueJob), so a lapsed deadline is kept in the record: the claim
  -- takes the run over by it (a heartbeat that still comes removes it).
  if not rec.leaseLapsed then redis.call('HSET', rk, 'leaseLapsed', deadline) end
  enqueueJob({ runId = runId, runtime = rec.runtime, now = now, delay = 0, out = out })
  return { OUTCOME.repair.Checked, cjson.encode(out) }
end
if rec.dispatch ~= tostring(O.dispatch) then return { OUTCOME.repair.Checked, '[]' } end -- another process repaired it
if O.jobAlive then
  redis.call('ZADD', K.leases, now + O.graceMs, runId)
  return { OUTCOME.repair.Checked, '[]' }
end
local delay = 0
if st == 'retrying' then delay = math.max(0, tonumber(rec.retryAt or '0') - now) end
enqueueJob({ runId = runId, runtime = rec.runtime, now = now, delay = delay, out = out })
return { OUTCOME.repair.Checked, cjson.encode(out) }
