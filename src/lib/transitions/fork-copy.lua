--[[ One chunk of a fork's copy (transitions/fork.lua began it): the next messages of the source's
  prefix, at most `maxMessages` and `maxBytes` bytes (one message larger than that comes
  alone), appended to the staging list. The position is the state's (`copied`), not the
  caller's, so a call sent twice (a reply lost, the call resent) copies the next chunk, never
  one chunk twice. The chunk that copies the last message checks that the source still ends
  the prefix with `lastRunId` and that the new session is still new (a submit into it while
  the fork went on wins: the fork is dropped), then makes the staging list the new session's
  history and records where it was forked, in this one call: from outside, the fork appears
  whole or not at all.
  KEYS  from, to, toSession, toQueue, toRuns, state, staging (as transitions/fork.lua)
  O     token (the fork's), leaseMs, maxMessages, maxBytes
  Returns: {Copied, done 1|0, messages copied by this call, their bytes} | {TargetTaken} the new session is
         not new any more (the fork dropped) | {HistoryChanged} the source no longer holds the prefix (the
         fork dropped) | {Gone} no such fork: its lease passed (or another token) ]]
-- @reply Copied: done, messages, bytes
-- @reply TargetTaken
-- @reply HistoryChanged
-- @reply Gone
-- @uses readFields, historyWithin, nowMs, dischargeStorage, ledgerKey
local st = readFields(K.state, { 'token', 'count', 'copied', 'lastRunId', 'fromSession', 'forkedAt', 'bytes' })
if st.token ~= O.token then return { OUTCOME.forkCopy.Gone } end
local count, copied = tonumber(st.count), tonumber(st.copied)
-- A fork that cannot end whole leaves nothing: UNLINK frees a large copy off the main thread.
local staged = string.sub(K.staging, #BASE + 1)
local function abandon(code)
  redis.call('DEL', K.state)
  redis.call('UNLINK', K.staging)
  dischargeStorage(st.bytes, staged)
  return { code }
end
if redis.call('LLEN', K.from) < count then return abandon(OUTCOME.forkCopy.HistoryChanged) end
-- The first message alone, then reads sized by the largest seen (historyWithin): a call reads at
-- most about its budget and one message, however large the messages are.
local page = historyWithin({
  key = K.from, from = copied, step = 1, limit = math.min(O.maxMessages, count - copied), maxBytes = O.maxBytes,
  first = true, firstRead = 1,
})
local bytes = 0
for _, m in ipairs(page) do bytes = bytes + #m end
if #page > 0 then redis.call('RPUSH', K.staging, unpack(page)) end
copied = copied + #page
if copied < count then
  redis.call('HSET', K.state, 'copied', copied)
  redis.call('PEXPIRE', K.state, O.leaseMs)
  redis.call('PEXPIRE', K.staging, O.leaseMs)
  redis.call('ZADD', ledgerKey(), 'XX', nowMs() + O.leaseMs, st.bytes .. ' ' .. staged)
  return { OUTCOME.forkCopy.Copied, 0, #page, bytes }
end
local last = redis.call('LINDEX', K.from, count - 1)
if not last or not string.find(last, '"runId":"' .. st.lastRunId .. '"', 1, true) then return abandon(OUTCOME.forkCopy.HistoryChanged) end
if redis.call('EXISTS', K.to, K.toSession, K.toQueue, K.toRuns) > 0 then return abandon(OUTCOME.forkCopy.TargetTaken) end
redis.call('RENAME', K.staging, K.to)
redis.call('PERSIST', K.to)
redis.call('HSET', K.toSession, 'forkedFrom', st.fromSession, 'forkedAt', st.forkedAt)
redis.call('DEL', K.state)
-- The copy stays counted as long as the new history is kept (sessions are: never looked at again).
redis.call('ZREM', ledgerKey(), st.bytes .. ' ' .. staged)
redis.call('ZADD', ledgerKey(), '+inf', st.bytes .. ' ' .. string.sub(K.to, #BASE + 1))
return { OUTCOME.forkCopy.Copied, 1, #page, bytes }
