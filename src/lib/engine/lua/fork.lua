--[[ Fork a session's history: copy the first `count` messages of one session's history into a
  new session's, in one call, so the copy is a prefix the source committed whole (a turn is
  committed by one RPUSH of the finish script, so a prefix that ends at a turn's end stays
  one). The copy shares nothing with its source: later commits on either side land on its own
  list only. The new session must be new: no history, no head or queue, no runs listed.
  KEYS  from (the source's history), to (the new session's history), toSession (its head and
        queue hash), toQueue, toRuns (its runs listing)
  The new session's hash records where it was forked (`forkedFrom`, `forkedAt`): a custom
  memory store copies its own turns from it at the new session's first run
  (src/lib/sessions/run-memory.ts).
  O     count (messages to copy, 0 or more), lastRunId (the runId the last copied message must
        carry: a history that changed since the API read it is not copied), fromSession,
        forkedAt (the run the fork is at)
  Returns: {0, messages copied} | {1} the new session is not new | {2} the source no longer
         holds that prefix ]]
if redis.call('EXISTS', K.to, K.toSession, K.toQueue, K.toRuns) > 0 then return { 1 } end
if redis.call('LLEN', K.from) < O.count then return { 2 } end
if O.count > 0 then
  local last = redis.call('LINDEX', K.from, O.count - 1)
  if not last or not string.find(last, '"runId":"' .. O.lastRunId .. '"', 1, true) then return { 2 } end
end
redis.call('HSET', K.toSession, 'forkedFrom', O.fromSession, 'forkedAt', O.forkedAt)
-- In chunks: unpack() of a whole long history would pass Lua's stack limit.
local chunk = 256
for i = 0, O.count - 1, chunk do
  local stop = math.min(i + chunk, O.count) - 1
  redis.call('RPUSH', K.to, unpack(redis.call('LRANGE', K.from, i, stop)))
end
return { 0, O.count }
