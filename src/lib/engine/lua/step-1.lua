--[[ Record a memoized step: 'start' marks a non-idempotent step as begun (so a crash
  before its result blocks the run instead of repeating it); 'done' stores its result,
  first writer wins.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] fence  ARGV[4] start | done
  ARGV[5] step key    ARGV[6] result JSON (done)
  Returns: {0, stored result JSON ('' for start)} | {-2} LEASE_LOST ]]
--@include lib
if not fenced(KEYS[1], ARGV[3]) then return { -2 } end
local sk = KEYS[1] .. ':steps'
if ARGV[4] == 'start' then
  redis.call('HSET', sk, ARGV[5] .. '#started', nowMs())
  return { 0, '' }
end
redis.call('HSETNX', sk, ARGV[5], ARGV[6])
return { 0, redis.call('HGET', sk, ARGV[5]) }
