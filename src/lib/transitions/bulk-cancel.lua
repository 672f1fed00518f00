--[[ Stop a bulk operation: a running one ends `cancelled` and leaves the scope's active index,
  so no batch starts after this (a batch under way still commits what it did); it stays
  readable for retentionMs. One that ended already is left as it is.
  KEYS  operation (its hash), active (the scope's running ones)
  O     id, now (epoch ms, Redis time as the caller read it), retentionMs
  Returns: {Stopped} stopped, or ended already | {NotFound} ]]
-- @reply Stopped
-- @reply NotFound
-- @uses int
local o = K.operation
if redis.call('EXISTS', o) == 0 then return { CODE.NotFound } end
if redis.call('HGET', o, 'status') == 'running' then
  redis.call('HSET', o, 'status', 'cancelled', 'finishedAt', int(O.now))
  redis.call('ZREM', K.active, O.id)
  redis.call('PEXPIRE', o, O.retentionMs)
end
return { OUTCOME.bulkCancel.Stopped }
