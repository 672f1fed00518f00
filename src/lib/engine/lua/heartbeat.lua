--[[ Extend a worker's lease on a run.
  KEYS  run, leases
  O     runId, fence, leaseMs
  Returns: {0, cancelRequested 0|1} | {-2} LEASE_LOST (another worker took over, or the run is gone)
         | {-3} NOT_RUNNABLE: this holder itself closed the attempt (finish, retry, block, or the
           shutdown hand-over) while the beat was on its way; nothing was lost, nothing renewed ]]
--@include lib
local rk = K.run
local cur = redis.call('HMGET', rk, 'fence', 'status', 'leaseOwner', 'cancelRequested')
if cur[1] ~= tostring(O.fence) then return { -2 } end
-- Renewing a released lease would undo the hand-over: the next worker would wait it out.
if cur[2] ~= 'running' or cur[3] == '' then return { -3 } end
local expires = nowMs() + O.leaseMs
redis.call('HSET', rk, 'leaseExpiresAt', expires)
redis.call('ZADD', K.leases, expires, O.runId)
return { 0, tonumber(cur[4] or '0') }
