--[[ Claim a cron schedule's due tick (src/lib/schedules/scheduler.ts): only while its nextAt
  is still the one the caller read and no tick is pending, so of processes racing for a tick
  one claims it and the others find it claimed. The claim moves nextAt on and marks the tick
  to fire `pending`, scored in the due index at its retry time: if its done mark
  (schedule-done.lua) does not come by then, any process submits its run again (the tick's
  idempotency key makes it the same run). A schedule gone or no longer active leaves the index.
  KEYS  schedule (its hash), due (the scope's schedules:due)
  O     id (the schedule's member in `due`), expected (the nextAt the caller read),
        next (the nextAt after the claim; absent: the expression has no tick left),
        fire (the tick to fire; absent: none, the missed ticks are skipped),
        retryAt (when a fired tick not yet done is looked at again)
  Returns: {Claimed} claimed | {NotClaimed} not claimed (gone, paused, or claimed by another process) ]]
-- @reply Claimed
-- @reply NotClaimed
-- @uses int, readFields
local s = K.schedule
if redis.call('EXISTS', s) == 0 then
  redis.call('ZREM', K.due, O.id)
  return { OUTCOME.scheduleClaim.NotClaimed }
end
local sched = readFields(s, { 'nextAt', 'pending', 'status' })
if sched.nextAt ~= int(O.expected) or sched.pending then return { OUTCOME.scheduleClaim.NotClaimed } end
if sched.status ~= 'active' then
  redis.call('ZREM', K.due, O.id)
  return { OUTCOME.scheduleClaim.NotClaimed }
end
if O.next then
  redis.call('HSET', s, 'nextAt', int(O.next))
else
  redis.call('HDEL', s, 'nextAt')
end
if O.fire then
  redis.call('HSET', s, 'pending', int(O.fire))
  redis.call('ZADD', K.due, int(O.retryAt), O.id)
elseif O.next then
  redis.call('ZADD', K.due, int(O.next), O.id)
else
  redis.call('ZREM', K.due, O.id)
end
return { OUTCOME.scheduleClaim.Claimed }
