--[[ A cron schedule's claimed tick is done: its run was made, or the submit refused it (a
  refusal that is the scope's state, not Redis's). Once per tick: only while the tick is the
  schedule's `pending`. The schedule goes back in the due index at its nextAt while it is
  active and has one, else leaves it.
  KEYS  schedule (its hash), due (the scope's schedules:due)
  O     id (the schedule's member in `due`), tick (epoch ms),
        runId (the run made; absent: none), refusal (JSON {tick, code, message}; absent: none)
  Returns: {Done} done | {NotPending} the tick was not pending (done already, or the schedule is gone) ]]
-- @reply Done
-- @reply NotPending
-- @uses int, readFields
local s = K.schedule
if redis.call('HGET', s, 'pending') ~= int(O.tick) then return { OUTCOME.scheduleDone.NotPending } end
redis.call('HDEL', s, 'pending')
if O.runId then
  redis.call('HSET', s, 'lastTick', int(O.tick), 'lastRunId', O.runId)
  redis.call('HINCRBY', s, 'fired', 1)
end
if O.refusal then redis.call('HSET', s, 'lastError', O.refusal) end
local sched = readFields(s, { 'nextAt', 'status' })
if sched.status == 'active' and sched.nextAt then
  redis.call('ZADD', K.due, sched.nextAt, O.id)
else
  redis.call('ZREM', K.due, O.id)
end
return { OUTCOME.scheduleDone.Done }
