--[[ Extend a worker's leases on the runs it holds in one scope, all in one call: one clock
  read and one ZADD for all of them, and per run one read of its record (the fence check).
  A lease's deadline is its score in `leases`, so renewing writes no record, but for a lease
  the sweeper had found over meanwhile (`leaseLapsed`, see transitions/repair.lua): the holder is
  alive after all, and the mark goes. The runs' record keys are derived from O.base (all in
  the scope's slot).
  KEYS  leases
  O     runs      [[runId, fence], ...]: the holder's attempts (the caller bounds the count)
        leaseMs
  Returns: one code per run, in order:
           Renewed | CancelRequested: renewed, and a cancel was requested
           LeaseLost (another worker took over, or the run is gone)
           NotRunnable: this holder itself closed the attempt (finish, retry, block, or the
              shutdown hand-over) while the beat was on its way; nothing was lost, nothing renewed ]]
-- @reply Renewed
-- @reply CancelRequested
-- @reply LeaseLost
-- @reply NotRunnable
-- @uses nowMs, runKey, readFields
local HEARTBEAT_READ = { 'fence', 'status', 'leaseOwner', 'cancelRequested', 'leaseLapsed' }
local expires = nowMs() + O.leaseMs
local codes, scores = {}, {}
for i, run in ipairs(O.runs) do
  local rk = runKey(run[1])
  local cur = readFields(rk, HEARTBEAT_READ)
  if cur.fence ~= tostring(run[2]) then
    codes[i] = CODE.LeaseLost
  -- Renewing a released lease would undo the hand-over: the next worker would wait it out.
  elseif cur.status ~= 'running' or cur.leaseOwner == '' then
    codes[i] = CODE.NotRunnable
  else
    if cur.leaseLapsed then redis.call('HDEL', rk, 'leaseLapsed') end
    scores[#scores + 1] = expires
    scores[#scores + 1] = run[1]
    codes[i] = cur.cancelRequested == '1' and OUTCOME.heartbeat.CancelRequested or OUTCOME.heartbeat.Renewed
  end
end
if #scores > 0 then redis.call('ZADD', K.leases, unpack(scores)) end
return codes
