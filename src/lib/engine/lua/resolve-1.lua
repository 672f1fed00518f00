--[[ Resolve a blocked run's step: 'value' stores the operator's result as the step's
  result; 'rerun' forgets the start marker so the step runs again. Either way the run
  is admitted again (it still owns its session), to continue the attempt it was in.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] step key  ARGV[4] value | rerun
  ARGV[5] value JSON  ARGV[6] events max len  ARGV[7] maxActive  ARGV[8] dispatch grace ms
  Returns: {0, dispatches JSON} | {-1} NOT_FOUND | {-8} STEP_NOT_BLOCKED ]]
--@include lib
local base, runId, rk, stepKey = ARGV[1], ARGV[2], KEYS[1], ARGV[3]
local r = redis.call('HMGET', rk, 'status', 'blocked')
if not r[1] then return { -1 } end
if r[1] ~= 'blocked' or cjson.decode(r[2]).stepKey ~= stepKey then return { -8 } end
local now, maxLen = nowMs(), tonumber(ARGV[6])
local steps = rk .. ':steps'
if ARGV[4] == 'value' then redis.call('HSET', steps, stepKey, ARGV[5]) end
redis.call('HDEL', steps, stepKey .. '#started')
redis.call('HDEL', rk, 'blocked')
-- The next claim continues the interrupted attempt instead of counting a new one.
redis.call('HSET', rk, 'resumed', 1)
local out = {}
statusEvent(base, runId, maxLen, { status = 'queued', resolved = { stepKey = stepKey, mode = ARGV[4] } })
admit(base, runId, 'blocked', now, tonumber(ARGV[7]), tonumber(ARGV[8]), maxLen, out)
flushPublished(base)
return { 0, cjson.encode(out) }
