--[[ Cancel a run (see cancelRun in transitions/lib/finish.lua).
  KEYS  run, meta, ready, leases, timers
  O     runId
  Returns: {AlreadyFinished | Cancelled | Requested (a cancel requested), dispatches JSON,
  record (flat, as this script left it)}; {NotFound} ]]
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
