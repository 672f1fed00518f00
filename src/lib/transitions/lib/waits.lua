-- Waits: a run's pending waits answered, dropped or timed out, and a waiting run woken.
-- @uses waitsKey, runKey, int, statusEvent, newWrite, tailInto, writeRecord, admit

-- ---- waits (transitions/wait.lua parks a run on them) ----
-- A run's pending waits live in `run:<id>:waits`: waitKey -> the wait as JSON text, made by
-- the worker and completed here by string concatenation, never decoded and encoded again
-- (cjson would turn an empty array of a schema or prompt into an object); and
-- `<waitKey>#token` -> the SHA-256 of its resume token, whose record `wait-token:<sha>`
-- lasts while the wait pends and RETENTION_MS after, so a second use of a token answers
-- WAIT_NOT_PENDING rather than "unknown". An answered wait's outcome is its step result.

-- The wait stops pending: its entry goes, its token's record starts to expire.
local function dropWait(runId, waitKey)
  local wk = waitsKey(runId)
  local h = redis.call('HGET', wk, waitKey .. '#token')
  if h then redis.call('PEXPIRE', call.base .. 'wait-token:' .. h, call.O.retention) end
  redis.call('HDEL', wk, waitKey, waitKey .. '#token')
end

-- Returns whether the run had any.
local function dropAllWaits(runId)
  local wk = waitsKey(runId)
  local flat = redis.call('HGETALL', wk)
  if #flat == 0 then return false end
  for i = 1, #flat, 2 do
    if string.sub(flat[i], -6) == '#token' then redis.call('PEXPIRE', call.base .. 'wait-token:' .. flat[i + 1], call.O.retention) end
  end
  redis.call('DEL', wk)
  return true
end

-- Stores a wait's outcome as its step result (`tail` is JSON text: `"v":<value>` and flags).
local function answerWait(a)
  local runId, waitKey, since, now, tail = a.runId, a.waitKey, a.since, a.now, a.tail
  redis.call('HSET', runKey(runId) .. ':steps', waitKey,
    '{"startedAt":' .. int(since) .. ',"finishedAt":' .. int(now) .. ',' .. tail .. '}')
  dropWait(runId, waitKey)
end

-- Waits whose deadline is their end, not a timeout: a sleep, and a wait for the next day's
-- token budget (src/lib/engine/flow/budgets.ts).
local ENDS_BY_ITSELF = { sleep = true, budget = true }

-- Pending waits whose deadline passed get their outcome: a sleep is over, any other wait
-- timed out (ctx.waitFor throws WaitTimeoutError). Returns the waits answered ({key, kind,
-- since} each) and the earliest deadline still ahead (nil when none).
local function expireWaits(runId, now)
  local flat = redis.call('HGETALL', waitsKey(runId))
  local done, nextAt = {}, nil
  for i = 1, #flat, 2 do
    local key = flat[i]
    if not string.find(key, '#', 1, true) then
      local w = cjson.decode(flat[i + 1])
      if w.expiresAt and w.expiresAt <= now then
        answerWait({
          runId = runId, waitKey = key, since = w.since, now = now,
          tail = ENDS_BY_ITSELF[w.kind] and '"v":null' or '"v":null,"timedOut":true',
        })
        done[#done + 1] = { key = key, kind = w.kind, since = w.since }
      elseif w.expiresAt and (not nextAt or w.expiresAt < nextAt) then
        nextAt = w.expiresAt
      end
    end
  end
  return done, nextAt
end

-- A waiting run goes on: admitted again like a session head (it still owns its session), to
-- continue the attempt it was in. Its wait deadline entry goes; its next park sets it anew.
local function wakeRun(runId, wait, now, out)
  statusEvent(runId, { status = 'queued', wait = wait })
  local w = newWrite('resumed', 1)
  tailInto(runId, w)
  writeRecord(runKey(runId), w)
  redis.call('ZREM', call.K.timers, 'wait:' .. runId)
  admit({ runId = runId, from = 'waiting', now = now, out = out })
end
