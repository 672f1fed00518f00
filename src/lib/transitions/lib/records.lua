-- Records by name: a record's writes buffered (newWrite), its fields read by name (readFields), the fence check.

-- A record's writes, buffered so a call writes each record once: newWrite(name, value, ...)
-- starts a buffer, put() and drop() add a field to set or to delete, and writeRecord() applies
-- it with one HSET and one HDEL (each only when it has fields). setStatus (transitions/lib/status.lua) applies
-- a buffer with its status move, in the same HSET.
local function newWrite(...)
  return { set = { ... }, gone = {} }
end

local function put(w, name, value)
  w.set[#w.set + 1] = name
  w.set[#w.set + 1] = value
end

local function drop(w, name)
  w.gone[#w.gone + 1] = name
end

local function writeRecord(rk, w)
  if #w.set > 0 then redis.call('HSET', rk, unpack(w.set)) end
  if #w.gone > 0 then redis.call('HDEL', rk, unpack(w.gone)) end
end

-- Whether the writer's batch `batch` of this fence was applied already: a batch number is
-- applied once (`appendedBatch` = `<fence>:<n>`, the last one applied, `mark` here; false when
-- the record has none), so a batch whose reply was lost and that arrives again is not written
-- twice.
local function applied(mark, fence, batch)
  if not mark then return false end
  local f, n = string.match(mark, '^(%d+):(%d+)$')
  return f == tostring(fence) and tonumber(n) >= tonumber(batch)
end

-- The same check for a caller that writes the record through a buffer: when the batch is new,
-- marks it applied by adding the field to `w`, the buffer of the caller's next write.
local function newBatch(fence, batch, mark, w)
  if applied(mark, fence, batch) then return false end
  put(w, 'appendedBatch', tostring(fence) .. ':' .. batch)
  return true
end

-- A hash's fields by name, in one read (HMGET): each value under its field's name, false when
-- the field is absent. The one way the library reads several fields of a record, so no script
-- reads a record by position (scripts/check-lua.mjs fails on any other HMGET).
local function readFields(key, names)
  local values = redis.call('HMGET', key, unpack(names))
  local rec = {}
  for i, name in ipairs(names) do rec[name] = values[i] end
  return rec
end

-- The fields every fence check reads (fenced below); a caller's own follow them in the same read.
local FENCE_READ = { 'fence', 'status', 'leaseOwner' }

-- The fields a fence check reads, then `names` (optional), as one list for readFields: a call
-- that checks many runs' fences (append) makes it once, not once a run.
local function fenceRead(names)
  local read = { unpack(FENCE_READ) }
  for _, name in ipairs(names or {}) do read[#read + 1] = name end
  return read
end

-- Whether `rec` (read with fenceRead's fields) says the caller still holds the run's lease:
-- same fence, still running, not handed over. No owner: the holder handed the run over at
-- shutdown (release); the fence moves on at the next claim, but the holder's right to write
-- ended with the hand-over.
local function holds(rec, fence)
  return rec.fence == tostring(fence) and rec.status == 'running' and rec.leaseOwner ~= ''
end

-- Checks that the caller still holds the run's lease (holds). `names` (optional): more fields
-- to read in the same HMGET. Returns whether it holds, and the record's fields read, by name
-- (the fence's three among them).
local function fenced(rk, fence, names)
  local rec = readFields(rk, fenceRead(names))
  return holds(rec, fence), rec
end
