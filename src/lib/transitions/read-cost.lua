--[[ Charge a costly read to its scope's read budget (src/lib/tenancy/read-budget.ts): a token
  bucket of bytes {tokens, at}, refilled at `rate` bytes a second up to `burst`, the scope's
  readBytesPerSec and readBurstBytes limits (its `limits` hash; a field absent: O's default).
  The read was made already, so its bytes are taken whatever the bucket holds: it may go
  below 0, into debt, and the API refuses the scope's costly reads until it has refilled to 0.
  Every byte served past the free allowance is thus charged once, and the rate holds over time.
  A full bucket is the same as no key, so the key expires once it would have refilled.
  `bytes` 0 is a look: what the bucket holds now, nothing written.
  KEYS  bucket, limits
  O     bytes (the answer's bytes past READ_FREE_BYTES, or 0), rate, burst (the defaults; rate 0: no budget)
  Returns {bytes the bucket holds after the charge (below 0: in debt), ms until it is out of debt (0: not in debt)} ]]
-- @reply: left, retryAfterMs
-- @uses nowMs, readFields
local l = readFields(K.limits, { 'readBytesPerSec', 'readBurstBytes' })
local rate = tonumber(l.readBytesPerSec) or O.rate
local burst = tonumber(l.readBurstBytes) or O.burst
if rate <= 0 then return { burst, 0 } end
local now = nowMs()
local b = readFields(K.bucket, { 'tokens', 'at' })
local tokens = burst
if b.tokens then
  tokens = math.min(burst, tonumber(b.tokens) + math.max(0, now - tonumber(b.at)) * rate / 1000)
end
if O.bytes > 0 then
  tokens = tokens - O.bytes
  redis.call('HSET', K.bucket, 'tokens', string.format('%.3f', tokens), 'at', now)
  redis.call('PEXPIRE', K.bucket, math.ceil((burst - tokens) * 1000 / rate) + 1000)
end
local waitMs = 0
if tokens < 0 then waitMs = math.ceil(-tokens * 1000 / rate) end
return { math.floor(tokens), waitMs }
