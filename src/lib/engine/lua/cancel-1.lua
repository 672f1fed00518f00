--[[ Cancel a run (see cancelRun in lib.lua).
  KEYS[1] run record
  ARGV[1] scope base  ARGV[2] runId  ARGV[3] events max len  ARGV[4] maxActive
  ARGV[5] dispatch grace ms  ARGV[6] retention ms  ARGV[7] cancel channel
  Returns: {code, dispatches JSON, record (flat)}: code 0 already finished, 1 cancelled,
  2 cancel requested (the record as this script left it); {-1} NOT_FOUND ]]
--@include lib
local out = {}
local code = cancelRun(ARGV[1], ARGV[2], nowMs(), tonumber(ARGV[4]), tonumber(ARGV[5]),
  tonumber(ARGV[3]), tonumber(ARGV[6]), ARGV[7], out)
if code < 0 then return { code } end
flushPublished(ARGV[1])
return { code, cjson.encode(out), redis.call('HGETALL', KEYS[1]) }
