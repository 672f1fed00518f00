--[[ Extend a worker's lease on a run.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] fence  ARGV[4] lease ms
  Returns: {0, cancelRequested 0|1} | {-2} LEASE_LOST (another worker took over, or the run ended) ]]
--@include lib
local rk = KEYS[1]
if not fenced(rk, ARGV[3]) then return { -2 } end
local expires = nowMs() + tonumber(ARGV[4])
redis.call('HSET', rk, 'leaseExpiresAt', expires)
redis.call('ZADD', ARGV[1] .. 'leases', expires, ARGV[2])
return { 0, tonumber(redis.call('HGET', rk, 'cancelRequested') or '0') }
