--[[ Record a memoized step: 'start' marks a non-idempotent step as begun (so a crash
  before its result blocks the run instead of repeating it); 'done' stores its result,
  first writer wins, and counts the model calls made for it (in the run's record: its totals,
  and the same by model in usageModels; in the scope's usage of the day).
  KEYS  run, steps, usage (the scope's usage hash of the step's day; op done with usage only)
  O     fence, op (start | done), stepKey, result (JSON text, op done),
        usage (op done, optional): {agent, calls: [{model, inputTokens, outputTokens}]},
        usageTtlMs (how long the scope's day hash is kept), usageRows (USAGE_ROWS_PER_DAY)
  Usage is counted only when this call stored the result: a step written twice (a reply
  lost and the write resent) or taken from the memo by a later attempt adds nothing, so
  every model call is counted once (invariant 13), even when its attempt dies right after.
  Rows are bounded: a scope's day holds at most usageRows agent × model rows and a run's
  usageModels at most usageRows models; a call that would add one more is counted in the
  catch-all row (agent and model `_other`; in the run: model `_other`), so totals stay exact.
  The day's hash also keeps `tokens`, the day's input and output tokens in all, which a scope's
  daily token budget is checked against with one HGET (src/lib/engine/flow/budgets.ts); a day an
  earlier version began counting gets it from the rows' sum at its first call here.
  Returns: {Recorded, stored result JSON ('' for start)} | {LeaseLost} ]]
-- @reply Recorded: result
-- @reply LeaseLost
-- @uses fenced, nowMs
if not fenced(K.run, O.fence) then return { CODE.LeaseLost } end
if O.op == 'start' then
  redis.call('HSET', K.steps, O.stepKey .. '#started', nowMs())
  return { OUTCOME.step.Recorded, '' }
end
local stored = redis.call('HSETNX', K.steps, O.stepKey, O.result)
if stored == 1 and O.usage then
  -- The run's usage by model, for its cost: record field usageModels, {model: [in, out, calls]}.
  local byModel = cjson.decode(redis.call('HGET', K.run, 'usageModels') or '{}')
  local models = 0
  for _ in pairs(byModel) do models = models + 1 end
  -- The day's rows: every row is three fields (in, out, calls), the catch-all row included;
  -- the one field more is the day's `tokens`.
  local rows = math.floor(redis.call('HLEN', K.usage) / 3)
  local hadRows, tokens = rows > 0, 0
  for _, c in ipairs(O.usage.calls) do
    redis.call('HINCRBY', K.run, 'usageIn', c.inputTokens)
    redis.call('HINCRBY', K.run, 'usageOut', c.outputTokens)
    redis.call('HINCRBY', K.run, 'usageCalls', 1)
    local model = c.model
    if not byModel[model] then
      if models >= O.usageRows then model = '_other' else models = models + 1 end
    end
    local m = byModel[model] or { 0, 0, 0 }
    byModel[model] = { m[1] + c.inputTokens, m[2] + c.outputTokens, m[3] + 1 }
    -- Agent names hold no colon (nor start with `_`), so a field splits into kind, agent and
    -- model at its first two, and the catch-all row is no agent's.
    local f = ':' .. O.usage.agent .. ':' .. c.model
    if redis.call('HEXISTS', K.usage, 'calls' .. f) == 0 then
      if rows >= O.usageRows then f = ':_other:_other' else rows = rows + 1 end
    end
    redis.call('HINCRBY', K.usage, 'in' .. f, c.inputTokens)
    redis.call('HINCRBY', K.usage, 'out' .. f, c.outputTokens)
    redis.call('HINCRBY', K.usage, 'calls' .. f, 1)
    tokens = tokens + c.inputTokens + c.outputTokens
  end
  -- No total before this call though the day has rows: an earlier version counted them; sum them all.
  if redis.call('HINCRBY', K.usage, 'tokens', tokens) == tokens and hadRows then
    local flat, sum = redis.call('HGETALL', K.usage), 0
    for i = 1, #flat, 2 do
      if string.find(flat[i], '^in:') or string.find(flat[i], '^out:') then sum = sum + tonumber(flat[i + 1]) end
    end
    redis.call('HSET', K.usage, 'tokens', sum)
  end
  redis.call('PEXPIRE', K.usage, O.usageTtlMs)
  redis.call('HSET', K.run, 'usageModels', cjson.encode(byModel))
end
return { OUTCOME.step.Recorded, redis.call('HGET', K.steps, O.stepKey) }
