-- A scope's stored bytes (the storage ledger) and its input artifacts' pins.

-- Input artifacts (src/lib/artifacts/redis-store.ts) live until RETENTION_MS after the last
-- run naming them ends. The run record's `artifactIds` (JSON array) names them; the submit
-- counts the run into each artifact's `runs` and clears its expiry, and the run's end counts
-- it out, setting the expiry again at zero. `artifactsPinned` makes the count-out happen once
-- per run. An id with no hash (a store other than Redis's) is left alone.
local function pinArtifacts(rk)
  local ids = redis.call('HGET', rk, 'artifactIds')
  if not ids then return end
  for _, id in ipairs(cjson.decode(ids)) do
    local ak = call.base .. 'artifact:' .. id
    if redis.call('EXISTS', ak) == 1 then
      redis.call('HINCRBY', ak, 'runs', 1)
      redis.call('PERSIST', ak)
    end
  end
  redis.call('HSET', rk, 'artifactsPinned', 1)
end

-- `pinned` (optional): the record's artifactsPinned as the caller read it (false = absent).
local function unpinArtifacts(rk, pinned)
  if pinned == false then return end
  if redis.call('HDEL', rk, 'artifactsPinned') == 0 then return end
  for _, id in ipairs(cjson.decode(redis.call('HGET', rk, 'artifactIds'))) do
    local ak = call.base .. 'artifact:' .. id
    if redis.call('EXISTS', ak) == 1 and redis.call('HINCRBY', ak, 'runs', -1) <= 0 then
      redis.call('PEXPIRE', ak, call.O.retention)
    end
  end
end

-- ---- a scope's stored bytes ----
-- `storage:bytes` counts what the scope stores of its own input: each run's record fields as
-- its submit wrote them (the record's `storedBytes`), each fork's copy of a history. The
-- ledger `storage` (zset) lists what holds them, `<bytes> <key>` (the key after the scope prefix whose
-- existence says the bytes are still stored), scored by when to look at it again: a finished
-- run at the end of its retention (finishRun), a fork's partial copy at the end of its lease,
-- a forked history never (+inf: sessions are kept). An unfinished run is not listed: it ends
-- through finishRun, which lists it. Keys expire by themselves and a counter cannot see an
-- EXPIRE, so each call that checks the count first looks at up to STORAGE_PRUNE entries
-- whose time came: one whose key is gone leaves the ledger and its bytes the count; one still
-- there (a retention an operator raised) is looked at again when its key expires.
local STORAGE_PRUNE = 100

local function ledgerKey() return call.base .. 'storage' end

-- The scope's stored bytes, once the entries due by `now` were looked at (up to STORAGE_PRUNE),
-- and whether more may be due.
local function storedBytes(now)
  local ledger, counter = ledgerKey(), ledgerKey() .. ':bytes'
  local freed = 0
  local due = redis.call('ZRANGEBYSCORE', ledger, '-inf', now, 'LIMIT', 0, STORAGE_PRUNE)
  for _, member in ipairs(due) do
    local size, key = string.match(member, '^(%d+) (%S+)$')
    local ttl = redis.call('PTTL', call.base .. key)
    if ttl == -2 then
      redis.call('ZREM', ledger, member)
      freed = freed + tonumber(size)
    elseif ttl == -1 then
      redis.call('ZADD', ledger, now + call.O.retention, member)
    else
      redis.call('ZADD', ledger, now + ttl, member)
    end
  end
  local held = tonumber(redis.call('GET', counter) or '0')
  if freed > 0 then
    held = math.max(0, held - freed)
    if held > 0 then redis.call('SET', counter, held) else redis.call('DEL', counter) end
  end
  return held, #due == STORAGE_PRUNE
end

-- Ms until the ledger's first entry is due (0: none is, ever): a refusal's Retry-After.
local function storageRetryMs(now)
  local first = redis.call('ZRANGE', ledgerKey(), 0, 0, 'WITHSCORES')
  local at = first[2] and tonumber(first[2])
  if not at or at == math.huge then return 0 end
  return math.max(1, at - now)
end

-- Counts `bytes` stored under `key` (after the scope prefix); `at` (optional): list them to look at then.
local function chargeStorage(bytes, key, at)
  redis.call('INCRBY', ledgerKey() .. ':bytes', bytes)
  if at then redis.call('ZADD', ledgerKey(), at, bytes .. ' ' .. key) end
end

-- Takes back a charge whose bytes were dropped at once (a fork that could not end whole).
local function dischargeStorage(bytes, key)
  redis.call('ZREM', ledgerKey(), bytes .. ' ' .. key)
  if redis.call('DECRBY', ledgerKey() .. ':bytes', bytes) <= 0 then redis.call('DEL', ledgerKey() .. ':bytes') end
end

-- A submit's caps (transitions/submit.lua), checked before anything is written: the scope's runs
-- accepted and not started, queued or dispatched (both `queued` to the API), and the bytes it
-- stores (`runBytes`: this run's record fields). Scheduled runs have their own cap
-- (SCHEDULED_MAX_PER_SCOPE); waiting, blocked, running and retrying ones started. `limits`:
-- scopeLimits(). Returns the refusal, or nil.
local function overCaps(limits, scheduled, runBytes, now)
  if not scheduled and limits.queued > 0 then
    local queued = redis.call('ZCARD', call.base .. 'status:queued') + redis.call('ZCARD', call.base .. 'status:dispatched')
    if queued >= limits.queued then return { CODE.QueuedRunsLimit, queued } end
  end
  if limits.stored > 0 then
    local held = storedBytes(now)
    if held + runBytes > limits.stored then return { CODE.StorageLimit, held, storageRetryMs(now) } end
  end
  return nil
end
