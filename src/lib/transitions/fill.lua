--[[ Give the scope's free slots to its parked runs (fillSlots in transitions/lib/admission.lua). Every call that
  frees a slot fills it in the same call, so this is for slots a limit gave since: an
  operator raised the scope's limits (src/lib/tenancy/limits.ts calls it), its fair share
  grew (src/lib/engine/flow/fair-share.ts), or a key's cap was raised (its keys waiting in
  ready:capped rejoin the turns here, `batch` per call). It also admits the session heads an
  earlier version parked in its `ready` list. Safe from every process at once.
  KEYS  meta, ready, leases, timers
  O     batch
  Returns: {Filled, dispatches JSON} ]]
-- @reply Filled: orders
-- @uses fillSlots, nowMs, joinTurns, keyFull, runKey, admit, READY_CAPPED
local now = nowMs()
local out = {}
for _, key in ipairs(redis.call('SRANDMEMBER', BASE .. READY_CAPPED, O.batch)) do
  if not keyFull(key) then
    redis.call('SREM', BASE .. READY_CAPPED, key)
    joinTurns(key)
  end
end
local legacy = BASE .. 'ready'
for _ = 1, O.batch do
  local runId = redis.call('LPOP', legacy)
  if not runId then break end
  if redis.call('HGET', runKey(runId), 'status') == 'queued' then admit({
    runId = runId, from = 'queued', now = now, out = out,
  }) end
end
fillSlots(now, out)
return { OUTCOME.fill.Filled, cjson.encode(out) }
