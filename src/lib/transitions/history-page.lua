--[[ A page of a session's history, oldest first, for GET …/sessions/{id}/messages: read-only.
  The page stops at `limit` messages or `maxBytes` bytes, whichever comes first (its first
  message comes whatever its size, so paging always makes progress); the messages are read
  in bounded chunks here, next to the data, so neither Redis's reply nor the API holds more
  than the page (historyWithin in transitions/lib/sessions.lua).
  KEYS  messages
  O     start (index of the page's first message), limit, maxBytes
  Returns: {messages, next index (-1 = no more)} ]]
-- @reply: messages, next
-- @uses historyWithin
local size = redis.call('MEMORY', 'USAGE', K.messages, 'SAMPLES', 0)
if not size then return { {}, -1 } end
local page, stop = historyWithin({
  key = K.messages, from = O.start, step = 1, limit = O.limit, maxBytes = O.maxBytes, first = true,
  size = tonumber(size),
})
local nextAt = O.start + #page
if stop == 'end' or (stop == 'count' and redis.call('LLEN', K.messages) <= nextAt) then nextAt = -1 end
return { page, nextAt }
