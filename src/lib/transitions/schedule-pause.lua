--[[ Pause a cron schedule (src/lib/schedules/schedule-store.ts): it stays, but leaves the
  scope's due index, so no scheduler looks at it. A tick already claimed (`pending`) keeps its
  place there: its run is still made, and its done mark (schedule-done.lua) then takes it out.
  KEYS  schedule (its hash), due (the scope's schedules:due)
  O     id (the schedule's member in `due`)
  Returns: {Paused} paused (or paused already) | {NotFound} ]]
-- @reply Paused
-- @reply NotFound
if redis.call('EXISTS', K.schedule) == 0 then return { CODE.NotFound } end
redis.call('HSET', K.schedule, 'status', 'paused')
if redis.call('HEXISTS', K.schedule, 'pending') == 0 then redis.call('ZREM', K.due, O.id) end
return { OUTCOME.schedulePause.Paused }
