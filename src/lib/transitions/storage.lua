--[[ Look at a scope's stored bytes (storedBytes in transitions/lib/storage.lua): up to 100 ledger entries whose
  time came, those whose key is gone taken off the count. Submits and forks do this before
  they check the count; the sweeper calls this about once a minute for each scope with a
  ledger, so the count the limits answer shows goes down while the scope submits nothing.
  KEYS  ledger (the scope's `storage`: the call's slot)
  Returns: {bytes stored, 1 if more entries may be due} ]]
-- @reply: stored, more
-- @uses storedBytes, nowMs
local held, more = storedBytes(nowMs())
return { held, more and 1 or 0 }
