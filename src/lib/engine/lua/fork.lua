--[[ Begin a fork of a session's history: the checks, then the fork's own state, so that its
  copy (lua/fork-copy.lua) goes in chunks of a bounded size, none holding Redis for long. The
  copy goes to a staging list of its own, under the new session's name but not its history,
  and becomes the new session's history only at the last chunk (a RENAME): until then nothing
  of the new session is there to read or to run in, and a fork that is not finished is never a
  session that looks whole. The state and the staging list expire `leaseMs` after the last
  chunk, so a fork whose process died leaves nothing behind once its lease has passed.
  KEYS  from (the source's history), to (the new session's history), toSession (its head and
        queue hash), toQueue, toRuns (its runs listing), state (the fork's state, a hash),
        staging (the copy being made)
  O     count (messages to copy, 0 or more), lastRunId (the runId the last copied message must
        carry: a history that changed since the API read it is not copied), fromSession,
        forkedAt (the run the fork is at), token (the fork's, for its chunks), leaseMs
  The new session's hash records where it was forked (`forkedFrom`, `forkedAt`): a custom
  memory store copies its own turns from it at the new session's first run
  (src/lib/sessions/run-memory.ts).
  Returns: {0, done 1|0} begun (done: nothing to copy, the fork is whole) | {1} the new
         session is not new (or another fork into it is under way) | {2} the source no
         longer holds that prefix ]]
if redis.call('EXISTS', K.to, K.toSession, K.toQueue, K.toRuns, K.state) > 0 then return { 1 } end
if redis.call('LLEN', K.from) < O.count then return { 2 } end
if O.count > 0 then
  local last = redis.call('LINDEX', K.from, O.count - 1)
  if not last or not string.find(last, '"runId":"' .. O.lastRunId .. '"', 1, true) then return { 2 } end
end
if O.count == 0 then
  redis.call('HSET', K.toSession, 'forkedFrom', O.fromSession, 'forkedAt', O.forkedAt)
  return { 0, 1 }
end
redis.call('HSET', K.state, 'token', O.token, 'count', O.count, 'copied', 0, 'lastRunId', O.lastRunId,
  'fromSession', O.fromSession, 'forkedAt', O.forkedAt)
redis.call('PEXPIRE', K.state, O.leaseMs)
return { 0, 0 }
