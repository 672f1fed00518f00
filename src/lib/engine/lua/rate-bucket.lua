--[[ A model provider's rate-limit bucket, shared by every worker (src/lib/engine/rate-limiter.ts
  calls it; RATE_LIMITS defines the buckets). One call is one atomic step on the bucket.

  The promise: the provider sees at most O.rpm requests, and at most O.tpm tokens, in any
  window of 60 s. A token bucket that starts full cannot keep it (its burst plus a window's
  refill lets twice the rate through some window), so the bucket is a sliding-window log:
  `grants` holds every grant of the last O.windowMs by its time, and a grant is made only when
  the grants still in the window, plus it, stay within both limits. ARCHITECTURE.md ("Provider
  rate limits") has the argument and why the window is a little longer than a minute.

  A grant's member is `<seq>:<tokens>:<r|s>`: its number, the tokens it counts for, and whether
  that is the caller's reservation (r, the estimate made before the call) or what the provider
  reported (s, settled). The bucket's hash keeps their sum (`tokens`) and the part of it still
  reserved (`reserved`), so no call sums the log: each call first trims the grants that left
  the window and takes their tokens off (each grant is added once and trimmed once, so a call
  costs O(1) amortised, plus its ZADD).

  KEYS  bucket (hash: tokens, reserved, seq, pausedUntil, pausedBy), grants (zset: member -> grant time)
  O     op: acquire | settle | pause | resume | read, and windowMs (every op trims the log first)
        acquire: rpm, tpm (absent: no such limit), tokens (to reserve), pollMs, pauseMs
        settle:  member (as acquire answered it), actual (the tokens the provider reported)
        pause:   untilMs (epoch ms; -1: until resumed) or forMs (from now, Redis time), by
                 (`provider`: only ever moves the pause later; `operator`: sets it)
  Returns
    acquire: {0, member, grant time, requests in the window, tokens in the window}: granted
             {1, ms to wait, why (paused | requests | tokens)}: not now; call again after that long
             {2, tpm}: the reservation is larger than tpm, so it can never be granted
    settle:  {0}
    pause:   {0, pausedUntil, 1 if this call set or moved the pause, else 0}
    resume:  {0, 1 if a pause was lifted, else 0}
    read:    {0, requests, tokens, reserved, pausedUntil (0: none), pausedBy, now} ]]
-- @uses nowMs, readFields, int
local now = nowMs()

local function parse(member)
  local seq, tokens, state = string.match(member, '^(%d+):(%d+):([rs])$')
  return seq, tonumber(tokens), state
end

-- Trims the grants that left the window, taking their tokens off the sums.
local gone = redis.call('ZRANGEBYSCORE', K.grants, '-inf', now - O.windowMs)
local fields = readFields(K.bucket, { 'tokens', 'reserved', 'pausedUntil', 'pausedBy' })
local sum = tonumber(fields.tokens) or 0
local reserved = tonumber(fields.reserved) or 0
if #gone > 0 then
  for _, member in ipairs(gone) do
    local _, tokens, state = parse(member)
    sum = sum - tokens
    if state == 'r' then reserved = reserved - tokens end
  end
  redis.call('ZREMRANGEBYSCORE', K.grants, '-inf', now - O.windowMs)
end
local requests = redis.call('ZCARD', K.grants)
-- An empty log holds no tokens, whatever a settle that never came left in the sums.
if requests == 0 then sum, reserved = 0, 0 end
if sum ~= (tonumber(fields.tokens) or 0) or reserved ~= (tonumber(fields.reserved) or 0) then
  redis.call('HSET', K.bucket, 'tokens', int(sum), 'reserved', int(reserved))
end

local pausedUntil = tonumber(fields.pausedUntil) or 0
if pausedUntil > 0 and pausedUntil <= now then
  redis.call('HDEL', K.bucket, 'pausedUntil', 'pausedBy')
  pausedUntil = 0
end

-- The hash lives while the log does, or while a pause lasts (an open-ended one: until resumed).
local function keep()
  redis.call('PEXPIRE', K.grants, O.windowMs + 1000)
  if pausedUntil < 0 then
    redis.call('PERSIST', K.bucket)
  else
    redis.call('PEXPIRE', K.bucket, math.max(O.windowMs, pausedUntil - now) + 1000)
  end
end

if O.op == 'read' then
  return { 0, requests, int(sum), int(reserved), int(pausedUntil), fields.pausedBy or '', int(now) }
end

if O.op == 'settle' then
  local seq, tokens, state = parse(O.member)
  -- A grant already out of the window has nothing left to correct.
  local at = seq and state == 'r' and redis.call('ZSCORE', K.grants, O.member)
  if at then
    redis.call('ZREM', K.grants, O.member)
    redis.call('ZADD', K.grants, at, seq .. ':' .. int(O.actual) .. ':s')
    redis.call('HSET', K.bucket, 'tokens', int(sum - tokens + O.actual), 'reserved', int(reserved - tokens))
  end
  return { 0 }
end

if O.op == 'pause' then
  local untilMs = O.untilMs or (now + O.forMs)
  local moved = 0
  if O.by == 'operator' or (pausedUntil >= 0 and untilMs > pausedUntil) then
    moved = (untilMs ~= pausedUntil) and 1 or 0
    pausedUntil = untilMs
    redis.call('HSET', K.bucket, 'pausedUntil', int(pausedUntil), 'pausedBy', O.by)
    keep()
  end
  return { 0, int(pausedUntil), moved }
end

if O.op == 'resume' then
  if pausedUntil == 0 then return { 0, 0 } end
  redis.call('HDEL', K.bucket, 'pausedUntil', 'pausedBy')
  return { 0, 1 }
end

-- acquire
if pausedUntil ~= 0 then
  -- Looked at again at least every pauseMs, so a resume (or a shorter pause) is seen soon.
  local left = pausedUntil < 0 and O.pauseMs or math.min(pausedUntil - now, O.pauseMs)
  return { 1, int(left), 'paused' }
end
if O.tpm and O.tokens > O.tpm then return { 2, O.tpm } end

local waitMs, why = 0, nil
if O.rpm and requests + 1 > O.rpm then
  -- The oldest grant leaving the window makes room for one more.
  local oldest = redis.call('ZRANGE', K.grants, 0, 0, 'WITHSCORES')
  waitMs, why = tonumber(oldest[2]) + O.windowMs - now + 1, 'requests'
end
if O.tpm and sum + O.tokens > O.tpm then
  -- When enough grants will have left the window: walk them from the oldest (at most 200;
  -- past that, the 200th's time is an early estimate and the caller simply asks again).
  local need = sum + O.tokens - O.tpm
  local walked = redis.call('ZRANGE', K.grants, 0, 199, 'WITHSCORES')
  local at = now
  for i = 1, #walked, 2 do
    local _, tokens = parse(walked[i])
    need = need - tokens
    at = tonumber(walked[i + 1])
    if need <= 0 then break end
  end
  local tokenWait = at + O.windowMs - now + 1
  -- Reservations still open may settle for less than they reserved and make room sooner:
  -- look again within pollMs while they could.
  if sum - reserved + O.tokens <= O.tpm then tokenWait = math.min(tokenWait, O.pollMs) end
  if tokenWait > waitMs then waitMs, why = tokenWait, 'tokens' end
end
if why then return { 1, int(math.max(1, waitMs)), why } end

local seq = redis.call('HINCRBY', K.bucket, 'seq', 1)
local member = int(seq) .. ':' .. int(O.tokens) .. ':r'
redis.call('ZADD', K.grants, now, member)
sum, reserved = sum + O.tokens, reserved + O.tokens
redis.call('HSET', K.bucket, 'tokens', int(sum), 'reserved', int(reserved))
keep()
return { 0, member, int(now), requests + 1, int(sum) }
