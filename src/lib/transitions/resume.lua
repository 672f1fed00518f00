--[[ Resume a pending wait with a value, exactly once: the value becomes the wait's step
  result and the wait stops pending, so a second resume (a concurrent one included) finds
  nothing to resume. A waiting run is admitted again (its scope slot re-acquired like a
  session head's, drains respected); a run that is running, queued or retrying keeps going
  and finds the value when it reaches the wait. Sleeps and budget waits are not resumable.
  KEYS  run, meta, ready, leases, timers, steps, waits
  O     runId, waitKey, value (JSON text, checked against the wait's schema by the caller),
        tokenHash (the resume token route: the wait must hold this token)
  Returns: {Resumed, dispatches JSON, kind, since, runtime, agent} | {NotFound} | {WaitNotPending} ]]
-- @reply Resumed: orders, kind, since, runtime, agent
-- @reply NotFound
-- @reply WaitNotPending
-- @uses readFields, knownTail, nowMs, answerWait, wakeRun, flushPublished, int
local runId, rk = O.runId, K.run
local rec = readFields(rk, { 'status', 'runtime', 'agent', 'logTail' })
if not rec.status then return { CODE.NotFound } end
knownTail(runId, rec.logTail)
local text = redis.call('HGET', K.waits, O.waitKey)
if not text then return { CODE.WaitNotPending } end
if O.tokenHash and redis.call('HGET', K.waits, O.waitKey .. '#token') ~= O.tokenHash then return { CODE.WaitNotPending } end
local w = cjson.decode(text)
-- A sleep and a token-budget wait end at their time, never by a value.
if w.kind == 'sleep' or w.kind == 'budget' then return { CODE.WaitNotPending } end
local now = nowMs()
answerWait({ runId = runId, waitKey = O.waitKey, since = w.since, now = now, tail = '"v":' .. O.value })
local out = {}
if rec.status == 'waiting' then wakeRun(runId, { key = O.waitKey, outcome = 'resumed' }, now, out) end
flushPublished()
return { OUTCOME.resume.Resumed, cjson.encode(out), w.kind, int(w.since), rec.runtime, rec.agent }
