--[[ Hand a run over at shutdown: the lease ends now (not at its deadline) and a job is
  dispatched, so another worker takes the run over at once (as a recovery, fence + 1).
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] fence  ARGV[4] dispatch grace ms
  Returns: {0, dispatches JSON} | {-2} LEASE_LOST ]]
--@include lib
local base, runId, rk = ARGV[1], ARGV[2], KEYS[1]
if not fenced(rk, ARGV[3]) then return { -2 } end
local now = nowMs()
redis.call('HSET', rk, 'leaseOwner', '', 'leaseExpiresAt', now - 1)
redis.call('ZADD', base .. 'leases', now + tonumber(ARGV[4]), runId)
local out = {}
enqueueJob(base, runId, redis.call('HGET', rk, 'runtime'), now, 0, tonumber(ARGV[4]), out)
return { 0, cjson.encode(out) }
