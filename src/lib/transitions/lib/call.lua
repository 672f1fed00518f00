--[[ The start of Baton's Redis Function library (src/lib/transitions/scripts.ts assembles it):
  the generated code tables (CODE, OUTCOME: src/lib/transitions/script-codes.ts), then the helper
  files of transitions/lib/ in a fixed order (call, records, events, status, limits, admission,
  sessions, storage, waits, finish, rate-window: each may use only those before it, and names them in its
  `-- @uses` lines), then each transition file (append.lua, claim.lua, ...) as one function of
  the library, `baton_<name>_v<version>_<digest>`, whose body is the file's text. The library
  is loaded into Redis once (FUNCTION LOAD), so a call runs its own body only: the helpers are
  not built again on every call, as they were when each call was a script that inlined them
  (about 12 µs of Redis CPU per call for the helpers, measured against FCALL).

  Calling convention (ScriptCaller.call in src/lib/transitions/caller.ts is the only caller):
    KEYS    the keys the call names, in the order of O.k
    ARGV[1] options, one JSON object decoded here into O. Always present:
              O.k        names of KEYS, in order: K[name] is the key
              O.base     the scope's key prefix `<prefix>:{<scope>}:`
            and the limits scripts share: O.maxLen (events per run log, as text), O.maxActive and
            O.maxActivePerKey (the defaults of a scope's slot limits), O.priorityStepMs,
            O.level (absent: no contention), O.capacity (live workers' slots; absent: none
            known), O.graceMs (dispatch grace), O.retention (ms a finished run stays),
            O.cancelChannel, O.spublish (true: a scope's notifications go by SPUBLISH),
            O.storage (the defaults of a scope's storage caps and fork rate: queued, bytes,
            forks, forkBytes). Each script's header lists the rest.
    ARGV[2..] payload lists some scripts take (event pairs, record fields): see their headers.
  A transition's body sees them as its locals O, K, ARGV and BASE (scripts.ts declares those
  it names); a helper reads them from `call` (call.O, call.K, call.argv, call.base).

  Keys: everything a script touches lives in the scope's Cluster slot. The scope's own keys
  (meta, ready, leases, ...) and the keys of the run a call is about arrive in KEYS.
  Derived here, because only a record read inside the script says which: the keys of other
  runs a transition moves (the next head of a session, parked runs handed a free slot),
  the per-runtime keys of a run's runtime (stats:<rt>, waiting:<rt>, drain:<rt>, held:<rt>)
  a run's session keys, the artifacts a run names (`artifact:<id>`) and the records of a run's
  resume tokens (`wait-token:<sha256>`). A run's log, steps, waits and live channel are its
  record key plus a fixed suffix (:events, :steps, :waits); the scope's live channel is BASE .. 'live'.
  All of them follow src/lib/keys.ts.

  Slots: a scope may have at most its slot limit of runs holding a slot (dispatched, running,
  retrying): its `maxActive` (the `limits` hash an operator sets, else O.maxActive), lowered
  to its fair share of the workers' slots while scopes contend for them (O.level;
  transitions/lib/limits.lua, src/lib/engine/flow/fair-share.ts). Session heads beyond that are parked by
  concurrency key and priority (transitions/lib/admission.lua).

  Replies: a list, most starting with a code by name: a refusal `CODE.<name>` (negative, the
  ScriptCode enum) or the script's outcome `OUTCOME.<script>.<name>`; each transition's
  `-- @reply` lines name its replies' fields, and its unit (<name>.ts) decodes them by the same
  names (scripts/check-lua.mjs checks that the two agree). ]]

-- The call's state, one table: begin() makes it at the start of every call, since the
-- library's locals outlive a call. argv: the call's arguments, as a script has them; O the
-- options, K the keys by name, base the scope's key prefix; published: the call's events
-- (flushPublished in events.lua); active and parked: the scope's slot count and parked count
-- once read, limit: its admission limits once read (limits.lua); now: the call's time once
-- known (nowMs below); deferred: the notifications handed back (withDeferred in events.lua).
local call
local function begin(keys, args)
  local O = cjson.decode(args[1])
  local K = {}
  for i, name in ipairs(O.k) do K[name] = keys[i] end
  call = { argv = args, O = O, K = K, base = O.base, published = {} }
  return call
end

local TERMINAL = { succeeded = true, failed = true, cancelled = true, expired = true }
local HOLDS_SLOT = { dispatched = true, running = true, retrying = true }
-- Not started yet (the API shows both as queued): indexed per runtime in `waiting:<runtime>`,
-- so stats can tell the oldest one's age and a drain can cancel them without a scan.
local WAITING = { queued = true, dispatched = true }

-- The call's time, epoch ms, the same for the whole call. Redis's clock: TIME, unless the
-- call logged an event before it asked. An event's id is `<ms>-<seq>`, stamped by the same
-- clock (or, should the log's last entry be later, that entry's ms), so the first event's
-- id gives the time without the TIME command (addEvent sets call.now).
local function nowMs()
  if not call.now then
    local t = redis.call('TIME')
    call.now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return call.now
end

local function runKey(runId) return call.base .. 'run:' .. runId end
local function waitsKey(runId) return call.base .. 'run:' .. runId .. ':waits' end
-- Epoch ms as JSON text: tostring of a large number may use an exponent.
local function int(n) return string.format('%d', n) end
local function sessionKey(sessionId) return call.base .. 'session:' .. sessionId end
local function runtimeKey(kind, runtime) return call.base .. kind .. ':' .. runtime end
