-- Re-runs (src/lib/engine/operations/reruns.ts): the bookkeeping a re-run's submit does.
-- @uses runKey

-- A re-run (`runId`, transitions/submit.lua with K.rerunOf) holds the copied step results (O.copySteps,
-- from K.copyFrom into K.steps) before any claim can read its steps. The run it repeats names
-- its newest O.rerunsKept re-runs (`reruns`, space-separated ids, oldest first) and counts them
-- all (`rerunCount`); its index (K.reruns) holds every one, for the listing, and lives as long
-- as its record. A record an earlier version wrote names every re-run and has no count or
-- index: the ids it names go into the index here, once (an id the index holds is not added
-- again), so the listing finds them too.
local function recordRerun(runId, now)
  local K, O = call.K, call.O
  for _, f in ipairs(O.copySteps) do
    local v = redis.call('HGET', K.copyFrom, f)
    if v then redis.call('HSET', K.steps, f, v) end
  end
  local ids = {}
  for id in string.gmatch(redis.call('HGET', K.rerunOf, 'reruns') or '', '%S+') do
    ids[#ids + 1] = id
    if not redis.call('ZSCORE', K.reruns, id) then
      redis.call('ZADD', K.reruns, tonumber(redis.call('HGET', runKey(id), 'createdAt')) or now, id)
    end
  end
  local count = tonumber(redis.call('HGET', K.rerunOf, 'rerunCount')) or #ids
  ids[#ids + 1] = runId
  redis.call('ZADD', K.reruns, now, runId)
  local ttl = redis.call('PTTL', K.rerunOf)
  if ttl > 0 then redis.call('PEXPIRE', K.reruns, ttl) end
  local kept = table.concat(ids, ' ', math.max(1, #ids - O.rerunsKept + 1), #ids)
  redis.call('HSET', K.rerunOf, 'reruns', kept, 'rerunCount', count + 1)
end
