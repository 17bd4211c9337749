-- history: reads one job's audit entries through the per-job index, without changing anything
-- (not a transition): time proportional to the job's own events, not to the stream's length.
-- KEYS[1] history (HASH member -> entry ids)  KEYS[2] audit
-- KEYS[3] history-previous (the index's previous generation, see _lib.lua)
-- ARGV[1..4] common (see _lib.lua; now_ms and trim are unused)   ARGV[5] member
-- Returns: the job's entries oldest first, each as XRANGE gives it ({id, {field, value, ...}});
-- ids whose entry retention has trimmed are left out. Empty when the index has none.
-- Events: none.
-- Publishes: nothing.
-- @include _lib.lua
local k = {history = KEYS[1], audit = KEYS[2], previous = KEYS[3]}
local result = {}
-- Every id of the previous generation is older than every id of the current one.
for _, index in ipairs({k.previous, k.history}) do
  local ids = rcall('HGET', index, ARGV[5])
  if ids then
    for entry_id in string.gmatch(ids, '%S+') do
      local found = rcall('XRANGE', k.audit, entry_id, entry_id)
      if #found == 1 then result[#result + 1] = found[1] end
    end
  end
end
return result
