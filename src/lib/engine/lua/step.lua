--[[ Record a memoized step: 'start' marks a non-idempotent step as begun (so a crash
  before its result blocks the run instead of repeating it); 'done' stores its result,
  first writer wins.
  KEYS  run, steps
  O     fence, op (start | done), stepKey, result (JSON text, op done)
  Returns: {0, stored result JSON ('' for start)} | {-2} LEASE_LOST ]]
--@include lib
if not fenced(K.run, O.fence) then return { -2 } end
if O.op == 'start' then
  redis.call('HSET', K.steps, O.stepKey .. '#started', nowMs())
  return { 0, '' }
end
redis.call('HSETNX', K.steps, O.stepKey, O.result)
return { 0, redis.call('HGET', K.steps, O.stepKey) }
