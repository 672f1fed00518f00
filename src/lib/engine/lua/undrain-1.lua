--[[ Resume a drained runtime for one scope: the flag goes, and the session heads parked in
  held:<runtime> are admitted again in the order they were parked (dispatched when the
  scope has a free slot, else queued for one in `ready`), up to `batch` per call; the caller
  repeats until none are left. A continuation call does nothing if the runtime was drained
  again in between, so a later drain always wins.
  KEYS[1] drain flag (<base>drain:<runtime>)
  ARGV[1] scope base  ARGV[2] runtime  ARGV[3] first call 1|0  ARGV[4] batch
  ARGV[5] events max len  ARGV[6] maxActive  ARGV[7] dispatch grace ms
  Returns: {resumed now, held runs left, dispatches JSON} ]]
--@include lib
local base, runtime = ARGV[1], ARGV[2]
local maxLen, maxActive, graceMs = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[1])
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  return { 0, 0, '[]' }
end
local heldKey = base .. 'held:' .. runtime
local now = nowMs()
local out = {}
local resumed = 0
for _ = 1, tonumber(ARGV[4]) do
  local runId = redis.call('LPOP', heldKey)
  if not runId then break end
  -- Runs cancelled while parked leave their entry behind; skip them.
  if redis.call('HGET', runKey(base, runId), 'status') == 'queued' then
    admit(base, runId, 'queued', now, maxActive, graceMs, maxLen, out)
    resumed = resumed + 1
  end
end
return { resumed, redis.call('LLEN', heldKey), cjson.encode(out) }
