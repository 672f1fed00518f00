--[[ Resume a drained runtime for one scope: the flag goes, and the session heads parked in
  held:<runtime> are admitted again in the order they were parked (dispatched when the
  scope has a free slot, else queued for one in `ready`), up to `batch` per call; the caller
  repeats until none are left. A continuation call does nothing if the runtime was drained
  again in between, so a later drain always wins.
  KEYS  drain (the flag), held (of this runtime), meta, ready, leases, timers
  O     first (bool: the first call of a resume), batch
  Returns: {resumed now, held runs left, dispatches JSON} ]]
-- @reply: resumed, left, orders
-- @uses nowMs, runKey, admit
if O.first then
  redis.call('DEL', K.drain)
elseif redis.call('EXISTS', K.drain) == 1 then
  local none = 0 -- drained again: nothing resumed, nothing this resume leaves
  return { none, none, '[]' }
end
local now = nowMs()
local out = {}
local resumed = 0
for _ = 1, O.batch do
  local runId = redis.call('LPOP', K.held)
  if not runId then break end
  -- Runs cancelled while parked leave their entry behind; skip them.
  if redis.call('HGET', runKey(runId), 'status') == 'queued' then
    admit({ runId = runId, from = 'queued', now = now, out = out })
    resumed = resumed + 1
  end
end
return { resumed, redis.call('LLEN', K.held), cjson.encode(out) }
