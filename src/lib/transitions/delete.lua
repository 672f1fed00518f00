--[[ Delete an ended run now, as the end of its retention would, and what indexes it: its
  record, event log, steps, index of its re-runs and steering record go (finishRun set them to
  expire; its waits and pending steering went when it ended), its entries leave the scope's
  listings (all runs, its session's, its status's, its agent's and its runtime's, and the index
  of the run it repeats), and its input's bytes leave the scope's stored bytes. What its end
  wrote elsewhere stays, as when it expires: the turn it committed to its session's history
  (the conversation is the session's), the scope's usage and status-move counts, its resume
  tokens' records (a run id and a wait key, expiring RETENTION_MS after the wait ended).
  A run that has not ended is left as it is: its worker or its session still needs it.
  KEYS  run, runs (the scope's listing)
  O     runId
  Returns: {Deleted} deleted | {NotEnded} not ended (cancel it first) | {NotFound} ]]
-- @reply Deleted
-- @reply NotEnded
-- @reply NotFound
-- @uses readFields, TERMINAL, runKey, sessionKey, runtimeKey, ledgerKey, dischargeStorage
local runId, rk = O.runId, K.run
local rec = readFields(rk, { 'status', 'sessionId', 'agent', 'runtime', 'storedBytes', 'rerunOf' })
if not rec.status then return { CODE.NotFound } end
if not TERMINAL[rec.status] then return { OUTCOME.delete.NotEnded } end
redis.call('DEL', rk, rk .. ':events', rk .. ':steps', rk .. ':reruns', rk .. ':steer')
redis.call('ZREM', K.runs, runId)
redis.call('ZREM', sessionKey(rec.sessionId) .. ':runs', runId)
redis.call('ZREM', BASE .. 'status:' .. rec.status, runId)
redis.call('ZREM', BASE .. 'agent:' .. rec.agent .. ':runs', runId)
redis.call('ZREM', runtimeKey('runtime', rec.runtime) .. ':runs', runId)
if rec.rerunOf then redis.call('ZREM', runKey(rec.rerunOf) .. ':reruns', runId) end
-- Its input stops counting now, as the ledger's look would once the record was gone. A run
-- that ended before the ledger was kept has no entry, and its bytes were never counted.
local charge = 'run:' .. runId
if rec.storedBytes and redis.call('ZSCORE', ledgerKey(), rec.storedBytes .. ' ' .. charge) then
  dischargeStorage(rec.storedBytes, charge)
end
return { OUTCOME.delete.Deleted }
