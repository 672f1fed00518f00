--[[ A page of a session's history as a fork looks for its end (src/lib/engine/operations/session-fork.ts):
  each message's runId and size, not its text, so the API finds where a turn ends without
  holding, or parsing, the history. Read-only. At most `maxMessages` messages and `maxBytes`
  bytes are read (the first whatever its size): the per-call budget of a fork's copy.
  A message's runId is the text after its first `"runId":"` (the key the finish writes; a quote
  inside the content is escaped, so the content never holds that sequence); '' when none.
  KEYS  messages
  O     start (index of the page's first message), maxMessages, maxBytes
  Returns: {runIds, sizes (bytes), next index (-1 = no more)} ]]
-- @reply: runIds, sizes, next
-- @uses historyWithin
-- The first message alone, then reads sized by the largest seen (as transitions/fork-copy.lua).
local page, stop = historyWithin({
  key = K.messages, from = O.start, step = 1, limit = O.maxMessages, maxBytes = O.maxBytes, first = true,
  firstRead = 1,
})
local ids, sizes = {}, {}
for i, m in ipairs(page) do
  local at = string.find(m, '"runId":"', 1, true)
  ids[i] = at and string.match(m, '^[^"]*', at + 9) or ''
  sizes[i] = #m
end
local nextAt = O.start + #page
if stop == 'end' or (stop == 'count' and redis.call('LLEN', K.messages) <= nextAt) then nextAt = -1 end
return { ids, sizes, nextAt }
