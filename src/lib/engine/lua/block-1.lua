--[[ Block a run: a non-idempotent step was started by an earlier holder and never
  recorded a result, so running it again could repeat a side effect. The run keeps its
  session (later turns wait) but gives up its scope slot until an operator resolves it.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] fence  ARGV[4] blocked JSON {stepKey, reason, since}
  ARGV[5] events max len  ARGV[6] maxActive  ARGV[7] dispatch grace ms
  Returns: {0, dispatches JSON} | {-2} LEASE_LOST ]]
--@include lib
local base, runId, rk = ARGV[1], ARGV[2], KEYS[1]
if not fenced(rk, ARGV[3]) then return { -2 } end
local now, maxLen = nowMs(), tonumber(ARGV[5])
setStatus(base, runId, redis.call('HGET', rk, 'runtime'), 'running', 'blocked', now)
redis.call('HSET', rk, 'blocked', ARGV[4], 'leaseOwner', '', 'leaseExpiresAt', 0)
redis.call('ZREM', base .. 'leases', runId)
releaseSlot(base)
local out = {}
fillSlots(base, now, tonumber(ARGV[6]), tonumber(ARGV[7]), maxLen, out)
statusEvent(base, runId, maxLen, { status = 'blocked', blocked = cjson.decode(ARGV[4]) })
flushPublished(base)
return { 0, cjson.encode(out) }
