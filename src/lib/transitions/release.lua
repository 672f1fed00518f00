--[[ Hand a run over at shutdown: the lease ends now (not at its deadline) and a job is
  dispatched, so another worker takes the run over at once (as a recovery, fence + 1).
  KEYS  run, leases
  O     runId, fence
  Returns: {Released, dispatches JSON} | {LeaseLost} ]]
-- @reply Released: orders
-- @reply LeaseLost
-- @uses fenced, nowMs, chargeRunTime, enqueueJob
local runId, rk = O.runId, K.run
if not fenced(rk, O.fence) then return { CODE.LeaseLost } end
local now = nowMs()
chargeRunTime(rk, now)
-- No owner: the next claim takes the run over at once (the run's score in `leases`, which
-- enqueueJob moves to the job's deadline, is only when the sweeper looks again, should no
-- claim come).
redis.call('HSET', rk, 'leaseOwner', '')
local out = {}
enqueueJob({ runId = runId, runtime = redis.call('HGET', rk, 'runtime'), now = now, delay = 0, out = out })
return { OUTCOME.release.Released, cjson.encode(out) }
