--[[ Give the scope's free slots to its parked session heads, oldest first. Every call that
  frees a slot fills it in the same call, so this is for runs parked under a lower
  MAX_ACTIVE_PER_SCOPE than the caller's: the sweeper calls it for a scope whose `ready`
  holds runs. Safe from every process at once.
  KEYS  meta, ready, leases, timers
  Returns: {0, dispatches JSON} ]]
-- @uses fillSlots, nowMs
local out = {}
fillSlots(nowMs(), out)
return { 0, cjson.encode(out) }
