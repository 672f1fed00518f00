--[[ Token bucket: take `cost` tokens if the bucket holds them. The bucket refills at `rate`
  tokens per second up to `burst`; a full bucket is the same as no key, so the key expires
  once it would have refilled, and a refused request writes nothing.
  KEYS  bucket (hash {tokens, at})
  O     rate (tokens per second, > 0), burst, cost
  Returns: {1, tokens left (floor)} | {0, ms until `cost` tokens are there} ]]
--@include core
local rate, burst, cost = O.rate, O.burst, O.cost
local now = nowMs()
local b = redis.call('HMGET', K.bucket, 'tokens', 'at')
local tokens = burst
if b[1] then
  tokens = math.min(burst, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * rate / 1000)
end
if tokens < cost then
  return { 0, math.ceil((cost - tokens) * 1000 / rate) }
end
tokens = tokens - cost
redis.call('HSET', K.bucket, 'tokens', tostring(tokens), 'at', now)
redis.call('PEXPIRE', K.bucket, math.ceil((burst - tokens) * 1000 / rate) + 1000)
return { 1, math.floor(tokens) }
