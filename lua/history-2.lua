-- history: reads one job's audit entries through the per-job index, without changing anything
-- (not a transition): time proportional to the job's own events, not to the stream's length.
-- KEYS[1] history (HASH member -> entry ids)  KEYS[2] audit
-- ARGV[1..4] common (see _lib.lua; now_ms and trim are unused)   ARGV[5] member
-- Returns: the job's entries oldest first, each as XRANGE gives it ({id, {field, value, ...}});
-- ids whose entry retention has trimmed are left out. Empty when the index has none.
-- Events: none.
-- Publishes: nothing.
-- @include _lib.lua
local k = {history = KEYS[1], audit = KEYS[2]}
local ids = rcall('HGET', k.history, ARGV[5])
local result = {}
if not ids then return result end
for entry_id in string.gmatch(ids, '%S+') do
  local found = rcall('XRANGE', k.audit, entry_id, entry_id)
  if #found == 1 then result[#result + 1] = found[1] end
end
return result
