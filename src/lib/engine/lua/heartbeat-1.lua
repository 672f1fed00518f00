--[[ Extend a worker's lease on a run.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] fence  ARGV[4] lease ms
  Returns: {0, cancelRequested 0|1} | {-2} LEASE_LOST (another worker took over, or the run is gone)
         | {-3} NOT_RUNNABLE: this holder itself closed the attempt (finish, retry, block, or the
           shutdown hand-over) while the beat was on its way; nothing was lost, nothing renewed ]]
--@include lib
local rk = KEYS[1]
local cur = redis.call('HMGET', rk, 'fence', 'status', 'leaseOwner')
if cur[1] ~= ARGV[3] then return { -2 } end
-- Renewing a released lease would undo the hand-over: the next worker would wait it out.
if cur[2] ~= 'running' or cur[3] == '' then return { -3 } end
local expires = nowMs() + tonumber(ARGV[4])
redis.call('HSET', rk, 'leaseExpiresAt', expires)
redis.call('ZADD', ARGV[1] .. 'leases', expires, ARGV[2])
return { 0, tonumber(redis.call('HGET', rk, 'cancelRequested') or '0') }
