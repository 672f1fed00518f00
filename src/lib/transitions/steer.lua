--[[ Take a run's steering messages at one of its boundaries: the messages pending now are
  delivered there, in the order sent, and the boundary remembers them, so an attempt that
  reaches the same boundary again (a retry, a recovery after a crash) takes the same ones and
  no others. Fenced: only the lease holder takes. A message either is taken here or, once the
  run ends, becomes the session's next turn (transitions/lib/sessions.lua, undeliverable), in one transition each.
  KEYS  run, steering (the session's steering messages), pending (the run's steer-pending),
        taken (the run's steer hash: boundary -> messages)
  O     runId, fence, boundary (the attempt's count of boundaries reached, from 1)
  Returns: {Taken, taken JSON: [{id, content}, ...], 1 taken now | 0 taken before} | {LeaseLost} ]]
-- @reply Taken: taken, fresh
-- @reply LeaseLost
-- @uses fenced, knownTail, addEvent, flushPublished
local runId = O.runId
local ok, rec = fenced(K.run, O.fence, { 'logTail', 'steered' })
if not ok then return { CODE.LeaseLost } end
local boundary = tostring(O.boundary)
local done = redis.call('HGET', K.taken, boundary)
if done then return { OUTCOME.steer.Taken, done, 0 } end
local ids = redis.call('LRANGE', K.pending, 0, -1)
local taken = {}
knownTail(runId, rec.logTail)
for _, mid in ipairs(ids) do
  -- Kept a day after the session's last steering message (transitions/submit.lua): a message older
  -- than that, still pending, is gone with its session's hash.
  local raw = redis.call('HGET', K.steering, mid)
  if raw then
    local m = cjson.decode(raw)
    m.fields = nil
    m.state = 'delivered'
    m.step = O.boundary
    redis.call('HSET', K.steering, mid, cjson.encode(m))
    taken[#taken + 1] = { id = mid, content = m.content }
    addEvent(runId, 'steering', cjson.encode({ messageId = mid, outcome = 'delivered', step = O.boundary, content = m.content }))
  end
end
if #ids > 0 then redis.call('DEL', K.pending) end
-- An empty boundary is remembered too: a message sent after it waits for the next one, in
-- this attempt and in any that replays this one's steps.
local encoded = #taken > 0 and cjson.encode(taken) or '[]'
redis.call('HSET', K.taken, boundary, encoded)
-- The run's end expires the boundaries with its record (finishRun in transitions/lib/finish.lua).
if not rec.steered then redis.call('HSET', K.run, 'steered', 1) end
flushPublished()
return { OUTCOME.steer.Taken, encoded, 1 }
