--[[ Store an uploaded artifact within its scope's quotas: at most O.maxBytes of the scope's
  artifacts held at once, and uploads at O.limit.rate bytes a second (bursts of
  O.limit.burst). Both are checked before anything of the upload is written, in this one
  call, so uploads racing each other can never pass the quota together.
  The ledger lists every artifact the scope holds, `<id> <size>`, scored by when it may have
  expired; `stored` is their bytes. Artifacts expire by themselves (a key's TTL), so each call
  first looks at up to PRUNE entries whose time has come: one that is gone leaves the ledger
  and its bytes the count; one a run keeps (no TTL: pinArtifacts in transitions/lib/storage.lua) is looked at
  again RETENTION_MS later (its last run's end gives it that long); one with a TTL at its end.
  KEYS  artifact (the new artifact's hash), ledger, stored, bucket (absent = no upload rate)
  O     id, contentType, size, createdAt, maxBytes (0 = no quota), limit {rate, burst} (with KEYS bucket)
  ARGV[2] the artifact's bytes
  Returns {Stored} | {Throttled, bytes held, ms until the bucket holds the upload}
        | {OverQuota, bytes held, ms until the oldest may expire} ]]
-- @reply Stored
-- @reply Throttled: held, retryAfterMs
-- @reply OverQuota: held, retryAfterMs
-- @uses nowMs, takeToken
local PRUNE = 100
local now = nowMs()

local freed = 0
for _, member in ipairs(redis.call('ZRANGEBYSCORE', K.ledger, '-inf', now, 'LIMIT', 0, PRUNE)) do
  local id, size = string.match(member, '^(%S+) (%d+)$')
  local ttl = redis.call('PTTL', BASE .. 'artifact:' .. id)
  if ttl == -2 then
    redis.call('ZREM', K.ledger, member)
    freed = freed + tonumber(size)
  elseif ttl == -1 then
    redis.call('ZADD', K.ledger, now + O.retention, member)
  else
    redis.call('ZADD', K.ledger, now + ttl, member)
  end
end
local stored = tonumber(redis.call('GET', K.stored) or '0')
if freed > 0 then
  stored = stored - freed
  if stored > 0 then redis.call('SET', K.stored, stored) else redis.call('DEL', K.stored) end
end

if O.maxBytes > 0 and stored + O.size > O.maxBytes then
  local oldest = redis.call('ZRANGE', K.ledger, 0, 0, 'WITHSCORES')
  return { OUTCOME.artifact.OverQuota, stored, oldest[2] and math.max(0, tonumber(oldest[2]) - now) or 0 }
end

-- The upload-rate bucket counts bytes: {tokens, at}, refilled at `rate` a second up to `burst`
-- (the submit bucket's rule, takeToken in transitions/lib/limits.lua, for `size` tokens at once). A full bucket
-- is the same as no key, so the key expires once it would have refilled.
if K.bucket then
  local ok, waitMs = takeToken({ bucket = K.bucket, rate = O.limit.rate, burst = O.limit.burst, now = now, n = O.size })
  if not ok then return { OUTCOME.artifact.Throttled, stored, waitMs } end
end

-- The hash never exists without its expiry, nor outside the ledger.
redis.call('HSET', K.artifact, 'contentType', O.contentType, 'size', O.size, 'createdAt', O.createdAt, 'runs', 0, 'bytes', ARGV[2])
redis.call('PEXPIRE', K.artifact, O.retention)
redis.call('ZADD', K.ledger, now + O.retention, O.id .. ' ' .. O.size)
redis.call('INCRBY', K.stored, O.size)
return { OUTCOME.artifact.Stored }
