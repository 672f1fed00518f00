--[[ Commit a bulk operation's batch, fenced by the lease token its claim gave: a batch whose
  lease ran out (another process does it again) counts nothing, so each run is counted once.
  Adds the batch's counts, moves the cursor and sets when the next batch may start; the last
  batch ends the operation `done`, readable for retentionMs.
  KEYS  operation (its hash), active (the scope's running ones)
  O     id, token (the lease token the claim gave), now (the claim's time: the operation's
        finishedAt if this batch ends it), matched, done, failed (the batch's counts), cursor
        (the listing position it reached), finished (bool: the listing has no more runs),
        notBefore (epoch ms), lastError (JSON {runId, code, message}; absent: none), retentionMs
  Returns: {Committed} committed | {NotHeld} the lease is not the caller's any more ]]
-- @reply Committed
-- @reply NotHeld
-- @uses int
local o = K.operation
if redis.call('HGET', o, 'lease') ~= O.token then return { OUTCOME.bulkCommit.NotHeld } end
redis.call('HDEL', o, 'lease', 'leaseUntil')
redis.call('HINCRBY', o, 'matched', O.matched)
redis.call('HINCRBY', o, 'done', O.done)
redis.call('HINCRBY', o, 'failed', O.failed)
redis.call('HSET', o, 'cursor', O.cursor, 'notBefore', int(O.notBefore))
if O.lastError then redis.call('HSET', o, 'lastError', O.lastError) end
if O.finished and redis.call('HGET', o, 'status') == 'running' then
  redis.call('HSET', o, 'status', 'done', 'finishedAt', int(O.now))
  redis.call('ZREM', K.active, O.id)
  redis.call('PEXPIRE', o, O.retentionMs)
end
return { OUTCOME.bulkCommit.Committed }
