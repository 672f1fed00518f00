--[[ Token bucket: take `cost` tokens if the bucket holds them. The bucket refills at `rate`
  tokens per second up to `burst`; a full bucket is the same as no key, so the key expires
  once it would have refilled, and a refused request writes nothing.
  KEYS[1] bucket hash {tokens, at}
  ARGV[1] rate (tokens per second, > 0)  ARGV[2] burst  ARGV[3] cost
  Returns: {1, tokens left (floor)} | {0, ms until `cost` tokens are there} ]]
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = burst
if b[1] then
  tokens = math.min(burst, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * rate / 1000)
end
if tokens < cost then
  return { 0, math.ceil((cost - tokens) * 1000 / rate) }
end
tokens = tokens - cost
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
return { 1, math.floor(tokens) }
