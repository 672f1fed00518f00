--[[ Park a run on its waits: the attempt reached waits nobody has answered (ctx.waitFor, a
  tool that needs approval, ctx.sleep) and is blocked on nothing else, so it ends without
  failing. The lease and the scope slot are released (a waiting run holds no worker, and
  another session head of the scope may start), the session stays with the run (later turns
  queue behind it), and a timeoutMs budget stops counting. A wait an earlier park recorded
  keeps its `since`, deadline and token; a pending wait this attempt did not reach again stops
  pending (the agent took another path). If a wait the attempt reached was answered
  meanwhile (resumed while the run ran, or its deadline passed), the run is admitted again
  at once, so no answer waits for a resume that already happened. The `status: waiting` event
  says what changed: the waits first reached in this park (`waits`), those that stopped pending
  because the attempt did not reach them again (`dropped`), and how many pend (`pending`); the
  run's record has them all. (Every park repeating every pending wait made a run with many
  waits write megabytes of events.)
  KEYS  run, meta, ready, leases, timers, steps, waits
  O     runId, fence, timeouts {waitKey: ms from first being reached}, untils {waitKey: epoch ms},
        tokens {waitKey: SHA-256 hex of its resume token}
  ARGV[2..] each wait reached, as JSON {key, kind, name, prompt?, schema?} (stored as sent)
  Returns: {Parked, dispatches JSON, answered JSON [{key, kind, since}], next deadline ms (0 = none), 1 if admitted again}
         | {CancelRequested} a cancel was requested: the run is not parked (its worker finishes it as cancelled)
         | {LeaseLost} ]]
-- @reply Parked: orders, answered, nextAt, admittedAgain
-- @reply CancelRequested
-- @reply LeaseLost
-- @uses fenced, knownTail, nowMs, int, dropWait, expireWaits, setStatus, runtimeKey, newWrite, put
-- @uses drop, releaseSlot, addEvent, tailInto, writeRecord, wakeRun, fillSlots, flushPublished, ENDS_BY_ITSELF
local runId, rk = O.runId, K.run
local ok, rec = fenced(rk, O.fence, { 'runtime', 'deadlineAt', 'cancelRequested', 'logTail', 'concurrencyKey' })
if not ok then return { CODE.LeaseLost } end
-- A waiting run would keep a cancel request nobody acts on until it is resumed.
if rec.cancelRequested == '1' then return { OUTCOME.wait.CancelRequested } end
knownTail(runId, rec.logTail)
local now = nowMs()
local timeouts, untils, tokens = O.timeouts or {}, O.untils or {}, O.tokens or {}
local reached, answered, fresh, dropped = {}, nil, {}, {}
for i = 2, #ARGV do
  local spec = cjson.decode(ARGV[i])
  local key = spec.key
  if redis.call('HEXISTS', K.steps, key) == 1 then
    answered = answered or { key = key, outcome = 'resumed' }
  elseif not reached[key] then
    reached[key] = true
    if redis.call('HEXISTS', K.waits, key) == 0 then
      local head = '{"since":' .. int(now)
      local expiresAt = (timeouts[key] and now + timeouts[key]) or untils[key]
      if expiresAt then head = head .. ',"expiresAt":' .. int(expiresAt) end
      local entry = head .. ',' .. string.sub(ARGV[i], 2)
      redis.call('HSET', K.waits, key, entry)
      fresh[#fresh + 1] = { key = key, text = entry }
      local h = tokens[key]
      if h then
        redis.call('HSET', K.waits, key .. '#token', h)
        redis.call('SET', BASE .. 'wait-token:' .. h, runId .. ' ' .. key)
      end
    end
  end
end
local flat = redis.call('HGETALL', K.waits)
for i = 1, #flat, 2 do
  if not string.find(flat[i], '#', 1, true) and not reached[flat[i]] then
    dropWait(runId, flat[i])
    dropped[#dropped + 1] = flat[i]
  end
end
-- A deadline that passed already (a sleepUntil in the past, a timeout shorter than the attempt).
local done, nextAt = expireWaits(runId, now)
if #done > 0 then
  answered = answered or { key = done[1].key, outcome = ENDS_BY_ITSELF[done[1].kind] and 'slept' or 'timed-out' }
end

setStatus({ runId = runId, runtime = rec.runtime, from = 'running', to = 'waiting', now = now })
local pending, kinds, seen = {}, {}, {}
flat = redis.call('HGETALL', K.waits)
for i = 1, #flat, 2 do
  if not string.find(flat[i], '#', 1, true) then
    pending[flat[i]] = true
    local kind = cjson.decode(flat[i + 1]).kind
    if not seen[kind] then
      seen[kind] = true
      kinds[#kinds + 1] = kind
      redis.call('HINCRBY', runtimeKey('stats', rec.runtime), 'wait:' .. kind, 1)
    end
  end
end
local w = newWrite('leaseOwner', '', 'waited', 1)
if #kinds > 0 then put(w, 'waitKinds', cjson.encode(kinds)) end
redis.call('ZREM', K.leases, runId)
if rec.deadlineAt then
  put(w, 'budgetLeft', math.max(0, tonumber(rec.deadlineAt) - now))
  drop(w, 'deadlineAt')
  redis.call('ZREM', K.timers, 'timeout:' .. runId)
end
if nextAt then redis.call('ZADD', K.timers, nextAt, 'wait:' .. runId) else redis.call('ZREM', K.timers, 'wait:' .. runId) end
releaseSlot(rec.concurrencyKey or '')
-- Built from the stored texts (see above); tokens are not in them, so the stream shows none.
-- A wait first reached here and already past its deadline is answered, not pending: left out.
local entries, count = {}, 0
for _, f in ipairs(fresh) do if pending[f.key] then entries[#entries + 1] = f.text end end
for _ in pairs(pending) do count = count + 1 end
local event = '{"status":"waiting","waits":[' .. table.concat(entries, ',') .. '],"pending":' .. count
if #dropped > 0 then event = event .. ',"dropped":' .. cjson.encode(dropped) end
addEvent(runId, 'status', event .. '}')
tailInto(runId, w)
writeRecord(rk, w)
local out = {}
if answered then wakeRun(runId, answered, now, out) end
fillSlots(now, out)
flushPublished()
return { OUTCOME.wait.Parked, cjson.encode(out), cjson.encode(done), nextAt or 0, answered and 1 or 0 }
