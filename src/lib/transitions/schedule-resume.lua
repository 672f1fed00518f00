--[[ Resume a paused cron schedule: its next tick is the first after now (the caller reads it
  off the expression), so ticks due while it was paused are not made up. An active schedule is
  left as it is. A tick still pending keeps its place in the due index (its done mark puts the
  schedule back at nextAt).
  KEYS  schedule (its hash), due (the scope's schedules:due)
  O     id (the schedule's member in `due`), nextAt (epoch ms; absent: the expression has no
        tick left, so the schedule stays out of the due index)
  Returns: {Resumed} active | {NotFound} ]]
-- @reply Resumed
-- @reply NotFound
-- @uses int
if redis.call('EXISTS', K.schedule) == 0 then return { CODE.NotFound } end
if redis.call('HGET', K.schedule, 'status') == 'active' then return { OUTCOME.scheduleResume.Resumed } end
redis.call('HSET', K.schedule, 'status', 'active')
if O.nextAt then
  redis.call('HSET', K.schedule, 'nextAt', int(O.nextAt))
else
  redis.call('HDEL', K.schedule, 'nextAt')
end
if O.nextAt and redis.call('HEXISTS', K.schedule, 'pending') == 0 then
  redis.call('ZADD', K.due, int(O.nextAt), O.id)
end
return { OUTCOME.scheduleResume.Resumed }
