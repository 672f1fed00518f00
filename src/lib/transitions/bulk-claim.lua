--[[ Take a bulk operation's next batch: the operation's lease goes to the caller's token,
  unless a live lease holds it or its pace says not yet (notBefore). A process killed holding
  the lease leaves it to run out, and the next claim does the batch again from the same cursor.
  An operation no longer running leaves the scope's active index.
  KEYS  operation (its hash), active (the scope's running ones)
  O     id, token (the caller's lease token), now (epoch ms, Redis time as the caller read it),
        leaseMs
  Returns: {Claimed, cursor} claimed: the batch starts after this position of the listing |
           {NotNow} not now (ended, leased, not yet due) ]]
-- @reply Claimed: cursor
-- @reply NotNow
-- @uses int, readFields
local o = K.operation
local op = readFields(o, { 'status', 'leaseUntil', 'notBefore', 'cursor' })
if op.status ~= 'running' then
  redis.call('ZREM', K.active, O.id)
  return { OUTCOME.bulkClaim.NotNow }
end
if tonumber(op.leaseUntil or '0') > O.now then return { OUTCOME.bulkClaim.NotNow } end
if tonumber(op.notBefore or '0') > O.now then return { OUTCOME.bulkClaim.NotNow } end
redis.call('HSET', o, 'lease', O.token, 'leaseUntil', int(O.now + O.leaseMs))
-- Every operation is made with a cursor; one without is held until its lease runs out.
if not op.cursor then return { OUTCOME.bulkClaim.NotNow } end
return { OUTCOME.bulkClaim.Claimed, op.cursor }
