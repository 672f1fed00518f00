--[[ A model provider's rate-limit bucket, shared by every worker and every scope
  (src/lib/engine/flow/rate-limiter.ts calls it; RATE_LIMITS defines the buckets). One call is one
  atomic step on the bucket.

  The promise: the provider sees at most O.rpm requests, and at most O.tpm tokens, in any
  window of 60 s. A token bucket that starts full cannot keep it (its burst plus a window's
  refill lets twice the rate through some window), so the bucket is a sliding-window log:
  `grants` holds every grant of the last O.windowMs by its time, and a grant is made only when
  the grants still in the window, plus it, stay within both limits. docs/rate-limits.md ("Inside: how
  the bucket keeps its promise") has the argument and why the window is a little longer than a minute.

  Two more rules only ever refuse a grant the window would allow, so the promise stands:
  - The spread (O.second): at most O.second.requests grants, and O.second.tokens tokens, in any
    second of the log, as providers that count a minute in shorter slices enforce it; a call
    that reserves more than a second's tokens is granted only in a second that holds none, and
    while one waits for such a second (`drainUntil`: its next ask and a margin) no smaller call
    is granted, so a stream of small calls cannot keep it out.
  - Fairness between scopes (O.scope, O.weight): while scopes wait for the bucket, it is shared
    by weight in start-time fair order. Each scope has a tag (`tags`): the virtual time its last
    grant finishes at, start + cost / weight, where start = max(its tag, vtime), cost is the
    grant's dominant share of the minute (max(1 / rpm, tokens / tpm)), and vtime the start of
    the latest grant. A scope refused a grant waits in `waiting` (scored by its tag) until it
    asks again or its lapse (`lapses`) passes; a grant that the window allows is refused (`share`)
    when a waiting scope's start is earlier than the asker's. So a newcomer starts at vtime
    (no credit for an idle past, no debt for a busy one), scopes that contend get grants in the
    ratio of their weights, and a scope alone (nobody waiting) takes the whole bucket.

  A grant's member is `<seq>:<tokens>:<r|s>`: its number, the tokens it counts for, and whether
  that is the caller's reservation (r, the estimate made before the call) or what the provider
  reported (s, settled). The bucket's hash keeps their sum (`tokens`) and the part of it still
  reserved (`reserved`), so no call sums the log: each call first trims the grants that left
  the window and takes their tokens off (each grant is added once and trimmed once, so a call
  costs O(1) amortised, plus its ZADD, plus the grants of the last second when O.second is set).

  KEYS  bucket (hash: tokens, reserved, seq, vtime, drainUntil, pausedUntil, pausedBy, pausedAt, pauseAsked),
        grants (zset: member -> grant time), tags (zset: scope -> virtual finish of its last grant),
        waiting (zset: scope -> its tag, scopes refused lately), lapses (zset: scope -> when its waiting ends)
  O     op: acquire | settle | pause | resume | read, and windowMs (every op trims the log first)
        acquire: rpm, tpm (absent: no such limit), tokens (to reserve), pollMs, pauseMs,
                 second ({requests, tokens}, either absent: no such limit; absent: no spread),
                 scope, weight (absent scope: no share kept), askMs, graceMs (a refused caller
                 asks again within min(its wait, askMs): its place, a scope's in the fair order or
                 a large call's hold on the second, lasts that long and graceMs more)
        settle:  member (as acquire answered it), actual (the tokens the provider reported)
        pause:   untilMs (epoch ms; -1: until resumed) or forMs (from now, Redis time), by
                 (`provider`: only ever moves the pause later; `operator`: sets it), askedMs
                 (a provider's: what its Retry-After asked for, before the cap)
  Returns
    acquire: {Granted, member, grant time, requests in the window, tokens in the window}
             {Waiting, ms to wait, why (paused | requests | tokens | second | share)}: ask again
             {TooLarge, tpm}: the reservation is larger than tpm, so it can never be granted
    settle:  {Settled}
    pause:   {Paused, pausedUntil, 1 if this call set or moved the pause, else 0}
    resume:  {Resumed, 1 if a pause was lifted, else 0}
    read:    {Read, requests, tokens, reserved, pausedUntil (0: none), pausedBy, now, pausedAt,
              pauseAsked (0: none), requests and tokens of the last second, waiting scopes
              (the first 20, next served first), how many wait} ]]
-- @reply Granted: member, at, requests, tokens
-- @reply Waiting: waitMs, why
-- @reply TooLarge: tpm
-- @reply Settled
-- @reply Paused: pausedUntil, moved
-- @reply Resumed: lifted
-- @reply Read: requests, tokens, reserved, pausedUntil, pausedBy, now, pausedAt, pauseAsked,
--   secondRequests, secondTokens, waiting, waitingCount
-- @uses nowMs, int, rateWindow, lastSecond, tokensOf, grantOf, PAUSE_FIELDS, tagText, tokensWait, spreadWait
local now = nowMs()
local b = rateWindow(now)
local sum, reserved, requests, pausedUntil, vtime, fields = b.sum, b.reserved, b.requests, b.pausedUntil, b.vtime, b.fields

-- The hash lives while the log does, or while a pause lasts (an open-ended one: until resumed);
-- the fairness keys live with the log.
local function keep()
  for _, key in ipairs({ K.grants, K.tags, K.waiting, K.lapses }) do
    redis.call('PEXPIRE', key, O.windowMs + 1000)
  end
  if pausedUntil < 0 then
    redis.call('PERSIST', K.bucket)
  else
    redis.call('PEXPIRE', K.bucket, math.max(O.windowMs, pausedUntil - now) + 1000)
  end
end

if O.op == 'read' then
  local second = lastSecond(now)
  local waiting = redis.call('ZRANGE', K.waiting, 0, 19)
  return {
    OUTCOME.rateBucket.Read, requests, int(sum), int(reserved), int(pausedUntil), fields.pausedBy or '', int(now),
    int(tonumber(fields.pausedAt) or 0), int(tonumber(fields.pauseAsked) or 0),
    #second / 2, int(tokensOf(second)), waiting, redis.call('ZCARD', K.waiting),
  }
end

if O.op == 'settle' then
  local seq, tokens, state = grantOf(O.member)
  -- A grant already out of the window has nothing left to correct.
  local at = seq and state == 'r' and redis.call('ZSCORE', K.grants, O.member)
  if at then
    redis.call('ZREM', K.grants, O.member)
    redis.call('ZADD', K.grants, at, seq .. ':' .. int(O.actual) .. ':s')
    redis.call('HSET', K.bucket, 'tokens', int(sum - tokens + O.actual), 'reserved', int(reserved - tokens))
  end
  return { OUTCOME.rateBucket.Settled }
end

if O.op == 'pause' then
  local untilMs = O.untilMs or (now + O.forMs)
  local moved = 0
  if O.by == 'operator' or (pausedUntil >= 0 and untilMs > pausedUntil) then
    moved = (untilMs ~= pausedUntil) and 1 or 0
    pausedUntil = untilMs
    redis.call('HSET', K.bucket, 'pausedUntil', int(pausedUntil), 'pausedBy', O.by, 'pausedAt', int(now))
    if O.askedMs then
      redis.call('HSET', K.bucket, 'pauseAsked', int(O.askedMs))
    else
      redis.call('HDEL', K.bucket, 'pauseAsked')
    end
    keep()
  end
  return { OUTCOME.rateBucket.Paused, int(pausedUntil), moved }
end

if O.op == 'resume' then
  if pausedUntil == 0 then return { OUTCOME.rateBucket.Resumed, 0 } end
  redis.call('HDEL', K.bucket, unpack(PAUSE_FIELDS))
  return { OUTCOME.rateBucket.Resumed, 1 }
end

-- acquire
local me = O.scope
-- Where the asking scope would start in the fair order (nil: no scope, no share kept).
local start = me and math.max(tonumber(redis.call('ZSCORE', K.tags, me)) or 0, vtime)

-- Not now: the scope waits, in line by its tag, until its next ask and a margin.
local function refuse(waitMs, why)
  waitMs = math.max(1, waitMs)
  if me then
    redis.call('ZADD', K.waiting, tagText(start), me)
    redis.call('ZADD', K.lapses, int(now + math.min(waitMs, O.askMs) + O.graceMs), me)
    keep()
  end
  return { OUTCOME.rateBucket.Waiting, int(waitMs), why }
end

if pausedUntil ~= 0 then
  -- Looked at again at least every pauseMs, so a resume (or a shorter pause) is seen soon.
  return refuse(pausedUntil < 0 and O.pauseMs or math.min(pausedUntil - now, O.pauseMs), 'paused')
end
if O.tpm and O.tokens > O.tpm then return { OUTCOME.rateBucket.TooLarge, O.tpm } end

local waitMs, why = 0, nil
if O.rpm and requests + 1 > O.rpm then
  -- The oldest grant leaving the window makes room for one more.
  local oldest = redis.call('ZRANGE', K.grants, 0, 0, 'WITHSCORES')
  waitMs, why = tonumber(oldest[2]) + O.windowMs - now + 1, 'requests'
end
if O.tpm and sum + O.tokens > O.tpm then
  local tokenWait = tokensWait(b, now)
  if tokenWait > waitMs then waitMs, why = tokenWait, 'tokens' end
end
if O.second then
  local secondWait = spreadWait(b, now, waitMs)
  if secondWait > waitMs then waitMs, why = secondWait, 'second' end
end
if why then return refuse(waitMs, why) end

if me then
  -- Room, but a scope waiting that starts earlier in the fair order comes first.
  local head = redis.call('ZRANGE', K.waiting, 0, 1, 'WITHSCORES')
  for i = 1, #head, 2 do
    if head[i] ~= me then
      if math.max(tonumber(head[i + 1]), vtime) < start then return refuse(O.pollMs, 'share') end
      break
    end
  end
end

local seq = redis.call('HINCRBY', K.bucket, 'seq', 1)
local member = int(seq) .. ':' .. int(O.tokens) .. ':r'
redis.call('ZADD', K.grants, now, member)
sum, reserved = sum + O.tokens, reserved + O.tokens
redis.call('HSET', K.bucket, 'tokens', int(sum), 'reserved', int(reserved))
if me then
  -- The grant's dominant share of the minute (a call of no tokens costs one token's share).
  local cost = 0
  if O.rpm then cost = 1 / O.rpm end
  if O.tpm then cost = math.max(cost, math.max(O.tokens, 1) / O.tpm) end
  local tag = start + cost / O.weight
  vtime = math.max(vtime, start)
  redis.call('HSET', K.bucket, 'vtime', tagText(vtime))
  redis.call('ZADD', K.tags, tagText(tag), me)
  redis.call('ZADD', K.waiting, 'XX', tagText(tag), me)
  -- A tag behind the virtual time says no more than none: such tags are dropped.
  redis.call('ZREMRANGEBYSCORE', K.tags, '-inf', '(' .. tagText(vtime))
end
keep()
return { OUTCOME.rateBucket.Granted, member, int(now), requests + 1, int(sum) }
