--[[ Finish a run: terminal status and result, the turn committed to the session history
  (user message + answer together, exactly once: this script runs once per run because it
  requires the current fence of a running run), `end` event, session and slot handed on.
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] fence  ARGV[4] succeeded | failed | cancelled
  ARGV[5] result JSON  ARGV[6] lastError JSON ('' = none)
  ARGV[7] user message JSON ('' = commit nothing)  ARGV[8] assistant message JSON
  ARGV[9] events max len  ARGV[10] maxActive  ARGV[11] dispatch grace ms  ARGV[12] retention ms
  Returns: {0, dispatches JSON} | {-2} LEASE_LOST ]]
--@include lib
local base, runId, rk = ARGV[1], ARGV[2], KEYS[1]
if not fenced(rk, ARGV[3]) then return { -2 } end
local now, status = nowMs(), ARGV[4]
local fields = { 'result', ARGV[5] }
if ARGV[6] ~= '' then fields[#fields + 1] = 'lastError'; fields[#fields + 1] = ARGV[6] end
if ARGV[7] ~= '' then
  local sessionId = redis.call('HGET', rk, 'sessionId')
  redis.call('RPUSH', base .. 'session:' .. sessionId .. ':messages', ARGV[7], ARGV[8])
end
local endData = '{"status":"' .. status .. '","result":' .. ARGV[5]
if ARGV[6] ~= '' then endData = endData .. ',"error":' .. ARGV[6] end
endData = endData .. '}'
local out = {}
finishRun(base, runId, status, fields, endData, now, tonumber(ARGV[10]), tonumber(ARGV[11]),
  tonumber(ARGV[9]), tonumber(ARGV[12]), out)
flushPublished(base)
return { 0, cjson.encode(out) }
