--[[ Cancel a run (see cancelRun in lib.lua).
  KEYS  run, meta, ready, leases, timers
  O     runId
  Returns: {code, dispatches JSON, record (flat)}: code 0 already finished, 1 cancelled,
  2 cancel requested (the record as this script left it); {-1} NOT_FOUND ]]
-- @reply AlreadyFinished: orders, run
-- @reply Cancelled: orders, run
-- @reply Requested: orders, run
-- @reply NotFound
-- @uses cancelRun, nowMs, flushPublished
local out = {}
local code = cancelRun(O.runId, nowMs(), out)
if code == CODE.NotFound then return { code } end
flushPublished()
return { code, cjson.encode(out), redis.call('HGETALL', K.run) }
