-- A scope's slot count and admission limits, read once per call; the submit's token bucket.
-- @uses readFields

-- ---- admission: slots, concurrency keys, priority ----
-- A scope's runs that hold a slot (dispatched, running, retrying) are counted in `meta`
-- field `active`; those of a concurrency key (the submit's concurrencyKey) also in field
-- `key:<key>`. A session head that finds no slot (the scope at its slot limit, or its key at
-- maxActivePerKey) is parked:
--   ready:q:<key>  the key's parked runs (zset; runs without a key share the key '', so
--                  `ready:q:`), scored by when they became due less priority ×
--                  call.O.priorityStepMs: higher priority first, then oldest, and a run is never
--                  passed by one that became due more than (9 - its priority) steps after it
--   ready          keys with parked runs that may start (zset), in line: a freed slot goes to
--                  the key first in line, which then goes to the back, as does a key joining
--                  (`meta` field `turn` numbers the places): keys with work take turns, one
--                  run each, so a key waits at most one turn per other key with work
--   ready:capped   keys with parked runs at their maxActivePerKey (set): they rejoin the
--                  turns when a run of theirs gives its slot back
-- `meta` field `parked` counts the parked runs.
local READY_CAPPED = 'ready:capped'
local DEFAULT_PRIORITY = 5

local function readyQueue(key) return call.base .. 'ready:q:' .. key end

-- The scope's slots in use, read once per call into call.active (lib/call.lua) with its parked count
-- (call.parked): every change to either in a call goes through these helpers, which keep the
-- copies exact.
local function activeCount()
  if call.active == nil then
    local m = readFields(call.K.meta, { 'active', 'parked' })
    call.active = tonumber(m.active or '0')
    call.parked = call.parked or tonumber(m.parked or '0')
  end
  return call.active
end

-- Whether runs parked before may start now (keys stand in line). The line is looked at only
-- when the scope has parked runs, or their count was not read in this call.
local function lineWaiting()
  activeCount()
  if call.parked == 0 then return false end
  return redis.call('EXISTS', call.K.ready) == 1
end

-- The scope's limits, read once per call into call.limit (lib/call.lua) from its `limits` hash (an
-- operator's, src/lib/tenancy/limits.ts; a field absent is the configured default in O):
-- `slots`, its maxActive, at most the live workers' slots (call.O.capacity) and lowered to its fair
-- share of them, call.O.level × its weight (never below 1), while scopes contend for them
-- (src/lib/engine/flow/fair-share.ts);
-- `perKey`, its maxActivePerKey (0: none); `rate` and `burst`, its submit rate (rate 0: none);
-- `queued` and `stored`, its caps on runs not started and on stored bytes, and `forks` and
-- `forkBytes`, its fork rate a minute (each 0: none); `retention`, how long its finished runs stay.
local function scopeLimits()
  if call.limit == nil then
    local l = readFields(call.base .. 'limits', { 'maxActive', 'maxActivePerKey', 'weight', 'submitRatePerSec', 'submitBurst',
      'maxQueuedRuns', 'maxStoredBytes', 'forksPerMinute', 'forkBytesPerMinute', 'retentionMs' })
    local slots = tonumber(l.maxActive) or call.O.maxActive
    -- More than the live workers' slots could only wait in BullMQ, ahead of other scopes' runs.
    if call.O.capacity and call.O.capacity < slots then slots = call.O.capacity end
    if call.O.level then
      local share = math.max(1, math.ceil(call.O.level * (tonumber(l.weight) or call.O.weight) - 1e-9))
      if share < slots then slots = share end
    end
    call.limit = {
      slots = slots,
      perKey = tonumber(l.maxActivePerKey) or call.O.maxActivePerKey,
      rate = tonumber(l.submitRatePerSec) or call.O.limit.rate,
      burst = tonumber(l.submitBurst) or call.O.limit.burst,
      -- Storage (src/lib/tenancy/limits.ts): 0 in a default is none.
      queued = tonumber(l.maxQueuedRuns) or call.O.storage.queued,
      stored = tonumber(l.maxStoredBytes) or call.O.storage.bytes,
      forks = tonumber(l.forksPerMinute) or call.O.storage.forks,
      forkBytes = tonumber(l.forkBytesPerMinute) or call.O.storage.forkBytes,
      -- How long the scope's finished runs are kept (RETENTION_MS unless an operator set it).
      retention = tonumber(l.retentionMs) or call.O.retention,
    }
  end
  return call.limit
end

-- Whether the concurrency key `key` has all the slots it may hold ('' has no cap).
local function keyFull(key)
  if key == '' then return false end
  local cap = scopeLimits().perKey
  return cap > 0 and tonumber(redis.call('HGET', call.K.meta, 'key:' .. key) or '0') >= cap
end

-- The scope's submit rate limit: a token bucket (hash {tokens, at}) shared by every API
-- process. Takes one token if the bucket holds one; it refills at `rate` tokens per second
-- up to `burst`. A full bucket is the same as no key, so the key expires once it would have
-- refilled, and a refusal writes nothing.
-- `n` (optional, 1 if absent): how many tokens to take at once (the artifact upload bucket
-- counts bytes). Returns true | false, ms until the tokens are there.
local function takeToken(a)
  local bucket, rate, burst, now, n = a.bucket, a.rate, a.burst, a.now, a.n
  n = n or 1
  local b = readFields(bucket, { 'tokens', 'at' })
  local tokens = burst
  if b.tokens then
    tokens = math.min(burst, tonumber(b.tokens) + math.max(0, now - tonumber(b.at)) * rate / 1000)
  end
  if tokens < n then return false, math.ceil((n - tokens) * 1000 / rate) end
  tokens = tokens - n
  redis.call('HSET', bucket, 'tokens', tostring(tokens), 'at', now)
  redis.call('PEXPIRE', bucket, math.ceil((burst - tokens) * 1000 / rate) + 1000)
  return true
end
