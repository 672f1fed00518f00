--[[ A model call's check against its scope's daily token budget (src/lib/engine/flow/budgets.ts),
  and, when it passes, a hold on what the call may use, so calls of one scope checked at the
  same moment see each other's: a call is let through only while today's tokens, plus every
  hold still out, plus its own, fit the budget. The call's tokens are counted in the day's
  `tokens` by the step script when its result is stored; the caller then lets the hold go
  (ZREM), or it lapses at its deadline (a worker that died in the call). Holds of one scope
  and day are its calls in flight, a few: each call sums them (no running total to drift).
  KEYS  limits (the scope's limits hash: tokensPerDay), usage (the day's usage hash: tokens),
        holds (zset of the day's holds: `<member>:<tokens>` -> deadline, Redis ms)
  O     defaultLimit (TOKENS_PER_DAY: the budget when the limits hash sets none; 0: none),
        estimate (the call's tokens at most; absent: not known), unestimated (what a call with
        no estimate holds, at most what is left), member (unique per call), holdMs
  Returns {Held, used, held, limit, reserved}: the call may be made, `reserved` tokens held for it
          {Refused, used, held, limit}: refused (the estimate does not fit; without one, nothing is left)
          {Malformed, the field as stored}: tokensPerDay is not a whole number (the limits route writes digits)
          {NoBudget}: the scope has no budget ]]
-- @reply Held: used, held, limit, reserved
-- @reply Refused: used, held, limit
-- @reply Malformed: field
-- @reply NoBudget
-- @uses nowMs, int
local raw = redis.call('HGET', K.limits, 'tokensPerDay')
local limit = O.defaultLimit
if raw then
  if not string.match(raw, '^%d+$') or #raw > 15 then return { OUTCOME.budgetHold.Malformed, raw } end
  limit = tonumber(raw)
end
if limit == 0 then return { OUTCOME.budgetHold.NoBudget } end
local now = nowMs()
local used = tonumber(redis.call('HGET', K.usage, 'tokens') or '0') or 0
redis.call('ZREMRANGEBYSCORE', K.holds, '-inf', now)
local held = 0
for _, m in ipairs(redis.call('ZRANGE', K.holds, 0, -1)) do
  held = held + (tonumber(string.match(m, ':(%d+)$')) or 0)
end
local reserve
if O.estimate then
  if used + held + O.estimate > limit then return { OUTCOME.budgetHold.Refused, used, held, limit } end
  reserve = O.estimate
else
  if used + held >= limit then return { OUTCOME.budgetHold.Refused, used, held, limit } end
  reserve = math.min(O.unestimated, limit - used - held)
end
redis.call('ZADD', K.holds, now + O.holdMs, O.member .. ':' .. int(reserve))
if redis.call('PTTL', K.holds) < O.holdMs then redis.call('PEXPIRE', K.holds, O.holdMs) end
return { OUTCOME.budgetHold.Held, used, held, limit, reserve }
