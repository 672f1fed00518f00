--[[ Make a bulk operation (src/lib/engine/operations/bulk-operations.ts), unless its scope already runs
  its cap of them.
  KEYS  operation (its hash), operations (the scope's, by creation), active (the scope's running ones)
  O     id, fields (the operation's hash: name -> value, all text), maxRunning (the scope's
        cap), now (epoch ms, Redis time as the caller read it)
  Returns: {Created} made | {AtCap} the scope runs maxRunning operations already ]]
-- @reply Created
-- @reply AtCap
if redis.call('ZCARD', K.active) >= O.maxRunning then return { OUTCOME.bulkCreate.AtCap } end
for name, value in pairs(O.fields) do redis.call('HSET', K.operation, name, value) end
redis.call('ZADD', K.operations, O.now, O.id)
redis.call('ZADD', K.active, O.now, O.id)
return { OUTCOME.bulkCreate.Created }
