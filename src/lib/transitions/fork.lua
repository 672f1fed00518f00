--[[ Begin a fork of a session's history: the checks, then the fork's own state, so that its
  copy (transitions/fork-copy.lua) goes in chunks of a bounded size, none holding Redis for long. The
  copy goes to a staging list of its own, under the new session's name but not its history,
  and becomes the new session's history only at the last chunk (a RENAME): until then nothing
  of the new session is there to read or to run in, and a fork that is not finished is never a
  session that looks whole. The state and the staging list expire `leaseMs` after the last
  chunk, so a fork whose process died leaves nothing behind once its lease has passed.
  KEYS  from (the source's history), to (the new session's history), toSession (its head and
        queue hash), toQueue, toRuns (its runs listing), state (the fork's state, a hash),
        staging (the copy being made), bucket (the scope's fork rate)
  O     bytes (the messages' bytes, as the API read them), count (messages to copy, 0 or
        more), lastRunId (the runId the last copied message must carry: a history that
        changed since the API read it is not copied), fromSession,
        forkedAt (the run the fork is at), token (the fork's, for its chunks), leaseMs
  The new session's hash records where it was forked (`forkedFrom`, `forkedAt`): a custom
  memory store copies its own turns from it at the new session's first run
  (src/lib/sessions/run-memory.ts).
  The scope's limits (scopeLimits in transitions/lib/limits.lua): forksPerMinute and forkBytesPerMinute, and its
  storage cap (maxStoredBytes), which the copy's bytes count against from here on.
  Returns: {Begun, done 1|0} begun (done: nothing to copy, the fork is whole) | {TargetTaken} the new
         session is not new (or another fork into it is under way) | {HistoryChanged} the source no
         longer holds that prefix | {StorageFull, bytes stored, ms until some may expire (0: unknown)}
         the copy would pass the scope's storage cap | {Throttled, ms until a fork may start} the
         scope's fork rate ]]
-- @reply Begun: whole
-- @reply TargetTaken
-- @reply HistoryChanged
-- @reply StorageFull: held, retryAfterMs
-- @reply Throttled: retryAfterMs
-- @uses nowMs, scopeLimits, readFields, storedBytes, storageRetryMs, chargeStorage
if redis.call('EXISTS', K.to, K.toSession, K.toQueue, K.toRuns, K.state) > 0 then return { OUTCOME.fork.TargetTaken } end
if redis.call('LLEN', K.from) < O.count then return { OUTCOME.fork.HistoryChanged } end
if O.count > 0 then
  local last = redis.call('LINDEX', K.from, O.count - 1)
  if not last or not string.find(last, '"runId":"' .. O.lastRunId .. '"', 1, true) then return { OUTCOME.fork.HistoryChanged } end
end
-- The scope's fork rate: one bucket of forks and bytes a minute, each refilled over a minute.
-- A fork is let through while a fork and a byte are left, and takes its bytes even past what
-- is left (the bucket goes below zero, and the next fork waits until it is above it again):
-- a fork larger than a minute's bytes passes once, and over any stretch of time the bytes
-- copied stay within the rate plus one fork.
local now = nowMs()
local limits = scopeLimits()
local b = readFields(K.bucket, { 'forks', 'bytes', 'at' })
local fpm, bpm = limits.forks, limits.forkBytes
local since = b.at and math.max(0, now - tonumber(b.at)) or 0
local forks, bytes = fpm, bpm
if b.forks then forks = math.min(fpm, tonumber(b.forks) + since * fpm / 60000) end
if b.bytes then bytes = math.min(bpm, tonumber(b.bytes) + since * bpm / 60000) end
local waitMs = 0
if fpm > 0 and forks < 1 then waitMs = math.ceil((1 - forks) * 60000 / fpm) end
if bpm > 0 and bytes <= 0 then waitMs = math.max(waitMs, math.ceil(-bytes * 60000 / bpm) + 1) end
if waitMs > 0 then return { OUTCOME.fork.Throttled, waitMs } end
-- The copy counts against the scope's storage, charged before a byte is copied.
if limits.stored > 0 and O.bytes > 0 then
  local held = storedBytes(now)
  if held + O.bytes > limits.stored then return { OUTCOME.fork.StorageFull, held, storageRetryMs(now) } end
end
if fpm > 0 or bpm > 0 then
  forks, bytes = forks - 1, bytes - O.bytes
  local refill = 0
  if fpm > 0 then refill = (fpm - forks) / fpm end
  if bpm > 0 then refill = math.max(refill, (bpm - bytes) / bpm) end
  redis.call('HSET', K.bucket, 'forks', tostring(forks), 'bytes', tostring(bytes), 'at', now)
  redis.call('PEXPIRE', K.bucket, math.ceil(refill * 60000) + 1000)
end
if O.count == 0 then
  redis.call('HSET', K.toSession, 'forkedFrom', O.fromSession, 'forkedAt', O.forkedAt)
  return { OUTCOME.fork.Begun, 1 }
end
redis.call('HSET', K.state, 'token', O.token, 'count', O.count, 'copied', 0, 'lastRunId', O.lastRunId,
  'fromSession', O.fromSession, 'forkedAt', O.forkedAt, 'bytes', O.bytes)
redis.call('PEXPIRE', K.state, O.leaseMs)
-- Listed under the partial copy until the last chunk lists it under the new history: a fork
-- whose process died stops counting once its copy expired.
chargeStorage(O.bytes, string.sub(K.staging, #BASE + 1), now + O.leaseMs)
return { OUTCOME.fork.Begun, 0 }
