-- A provider's rate-limit bucket (transitions/rate-bucket.lua): its sliding-window log read and trimmed,
-- and how long an ask waits for the window's tokens and for the second's spread.
-- @uses readFields, int

-- The spread's slice: OpenAI documents its per-minute limits as enforced per second.
local SECOND_MS = 1000
-- A second holding more grants than this is taken as full: one call reads no more of them.
local SECOND_WALK = 1000
-- Lapsed waiters dropped per call at most (the rest go at the next).
local LAPSED_BATCH = 500
local PAUSE_FIELDS = { 'pausedUntil', 'pausedBy', 'pausedAt', 'pauseAsked' }

-- A grant's member `<seq>:<tokens>:<r|s>`: its number, its tokens, and r (reserved) or s (settled).
local function grantOf(member)
  local seq, tokens, state = string.match(member, '^(%d+):(%d+):([rs])$')
  return seq, tonumber(tokens), state
end

-- A tag as text: the virtual times are fractions, and ZADD reads them back exactly.
local function tagText(x) return string.format('%.17g', x) end

-- The bucket at `now`, its log trimmed first: the grants that left the window go, their tokens
-- off the sums; an expired pause is lifted; scopes whose waiting lapsed (they did not ask again
-- in time) wait no more. Returns {sum, reserved, requests, pausedUntil, vtime, fields (the hash
-- as read)}.
local function rateWindow(now)
  local K, O = call.K, call.O
  local gone = redis.call('ZRANGEBYSCORE', K.grants, '-inf', now - O.windowMs)
  local fields = readFields(K.bucket, {
    'tokens', 'reserved', 'pausedUntil', 'pausedBy', 'pausedAt', 'pauseAsked', 'vtime', 'drainUntil',
  })
  local sum = tonumber(fields.tokens) or 0
  local reserved = tonumber(fields.reserved) or 0
  if #gone > 0 then
    for _, member in ipairs(gone) do
      local _, tokens, state = grantOf(member)
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
    redis.call('HDEL', K.bucket, unpack(PAUSE_FIELDS))
    pausedUntil = 0
  end
  local lapsed = redis.call('ZRANGEBYSCORE', K.lapses, '-inf', now, 'LIMIT', 0, LAPSED_BATCH)
  if #lapsed > 0 then
    redis.call('ZREM', K.waiting, unpack(lapsed))
    redis.call('ZREM', K.lapses, unpack(lapsed))
  end
  return {
    sum = sum, reserved = reserved, requests = requests, pausedUntil = pausedUntil,
    vtime = tonumber(fields.vtime) or 0, fields = fields,
  }
end

-- The grants of the last second, oldest first: {member, time, ...} (at most SECOND_WALK).
local function lastSecond(now)
  return redis.call('ZRANGEBYSCORE', call.K.grants, '(' .. int(now - SECOND_MS), '+inf', 'WITHSCORES', 'LIMIT', 0, SECOND_WALK)
end

local function tokensOf(log)
  local total = 0
  for i = 1, #log, 2 do
    local _, tokens = grantOf(log[i])
    total = total + tokens
  end
  return total
end

-- When the oldest grants of `log` ({member, time, ...}) that make up `need` tokens are out of
-- a window of `spanMs`, from `now` (the last one walked, when they do not add up to it).
local function freedAt(log, need, now, spanMs)
  local at = now
  for i = 1, #log, 2 do
    local _, tokens = grantOf(log[i])
    need = need - tokens
    at = tonumber(log[i + 1])
    if need <= 0 then break end
  end
  return at + spanMs - now
end

-- How long an ask for O.tokens waits for the window's tokens (O.tpm) to make room, given the
-- bucket `b` (rateWindow): walks the grants from the oldest (at most 200; past that, the 200th's
-- time is an early estimate and the caller simply asks again).
local function tokensWait(b, now)
  local O = call.O
  local walked = redis.call('ZRANGE', call.K.grants, 0, 199, 'WITHSCORES')
  local wait = freedAt(walked, b.sum + O.tokens - O.tpm, now, O.windowMs) + 1
  -- Reservations still open may settle for less than they reserved and make room sooner:
  -- look again within pollMs while they could.
  if b.sum - b.reserved + O.tokens <= O.tpm then wait = math.min(wait, O.pollMs) end
  return wait
end

-- How long an ask waits for the spread (O.second): a grant leaves the second SECOND_MS after
-- it was made. A call larger than a second's tokens fits only a second that holds none; while
-- only the second is in its way (`waitMs`, the window's wait, is 0), smaller calls hold off
-- until its next ask (`drainUntil`), so that the second empties for it.
local function spreadWait(b, now, waitMs)
  local O, K = call.O, call.K
  local second = lastSecond(now)
  local n = #second / 2
  if n >= SECOND_WALK then return O.pollMs end
  local wait = 0
  if O.second.requests and n + 1 > O.second.requests then
    wait = tonumber(second[2 * (n - O.second.requests + 1)]) + SECOND_MS - now
  end
  local large = O.second.tokens and O.tokens > O.second.tokens
  local limit = O.second.tokens and math.max(O.second.tokens, O.tokens)
  local need = limit and tokensOf(second) + O.tokens - limit or 0
  if need > 0 then wait = math.max(wait, freedAt(second, need, now, SECOND_MS)) end
  local drainUntil = tonumber(b.fields.drainUntil) or 0
  if large and wait > 0 and waitMs == 0 then
    -- Not while the minute is full for it: that is no second's doing.
    redis.call('HSET', K.bucket, 'drainUntil', int(now + math.min(wait, O.askMs) + O.graceMs))
  elseif large then
    if drainUntil > 0 then redis.call('HDEL', K.bucket, 'drainUntil') end
  elseif O.second.tokens and drainUntil > now then
    wait = math.max(wait, math.min(drainUntil - now, O.pollMs))
  end
  return wait
end
