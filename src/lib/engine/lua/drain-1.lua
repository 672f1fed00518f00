--[[ Drain a runtime for one scope: from now on the scope's runs of that runtime are not
  started there (submit answers DRAINING, admission parks session heads in held:<runtime>,
  a claim parks a dispatched run). Running and retrying runs go on and finish.
  With cancelQueued, also cancels up to `batch` of the scope's waiting runs (queued or
  dispatched) of that runtime per call; the caller repeats until none remain. The set only
  shrinks while the flag is up, because a draining runtime accepts no submit.
  KEYS[1] drain flag (<base>drain:<runtime>)
  ARGV[1] scope base  ARGV[2] runtime  ARGV[3] cancelQueued 0|1  ARGV[4] batch
  ARGV[5] events max len  ARGV[6] maxActive  ARGV[7] dispatch grace ms  ARGV[8] retention ms
  ARGV[9] cancel channel
  Returns: {cancelled now, waiting runs left, dispatches JSON} ]]
--@include lib
local base, runtime = ARGV[1], ARGV[2]
local maxLen, maxActive, graceMs, retention = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local now = nowMs()
redis.call('SET', KEYS[1], now, 'NX')
local waitingKey = base .. 'waiting:' .. runtime
local out = {}
local cancelled = 0
if ARGV[3] == '1' then
  for _, runId in ipairs(redis.call('ZRANGE', waitingKey, 0, tonumber(ARGV[4]) - 1)) do
    local st = redis.call('HGET', runKey(base, runId), 'status')
    if WAITING[st] then
      cancelRun(base, runId, now, maxActive, graceMs, maxLen, retention, ARGV[9], out)
      cancelled = cancelled + 1
    else
      -- Defensive: an index entry whose run is gone or started no longer waits.
      redis.call('ZREM', waitingKey, runId)
    end
  end
  flushPublished(base)
end
local left = redis.call('ZCARD', waitingKey)
-- Every run the held list names was waiting; with none left, all its entries are stale.
if ARGV[3] == '1' and left == 0 then redis.call('DEL', base .. 'held:' .. runtime) end
return { cancelled, left, cjson.encode(out) }
