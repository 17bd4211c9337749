-- history: reads one job's audit entries through the per-job index, without changing anything
-- (not a transition): time proportional to the job's own events, not to the stream's length.
-- KEYS[1] history (HASH member -> entry ids)  KEYS[2] audit
-- KEYS[3] history-previous (the index's previous generation, see _lib.lua)
-- KEYS[4] jobs (a stored job's record keeps the id of its `added` entry, field h: see _lib.lua)
-- ARGV[1..4] common (see _lib.lua; now_ms and trim are unused)   ARGV[5] member
-- Returns: the job's entries oldest first, each as XRANGE gives it ({id, {field, value, ...}});
-- ids whose entry retention has trimmed are left out. Empty when neither holds any.
-- Events: none.
-- Publishes: nothing.
-- @include _lib.lua
local k = {history = KEYS[1], audit = KEYS[2], previous = KEYS[3], jobs = KEYS[4]}
local member = ARGV[5]
local ids, seen = {}, {}
local function take(entry_id)
  if not seen[entry_id] then
    seen[entry_id] = true
    ids[#ids + 1] = entry_id
  end
end
local record = load_record(k.jobs, member)
if record and record[FIELD_HISTORY] then take(record[FIELD_HISTORY]) end
for _, index in ipairs({k.previous, k.history}) do
  local found = rcall('HGET', index, member)
  if found then
    for entry_id in string.gmatch(found, '%S+') do take(entry_id) end
  end
end
-- Oldest first by id. The index's own ids are in order, but an id a record kept reaches the
-- index only when the record goes, after the job's later ids (keep_added_entry in _lib.lua).
if #ids > 1 then
  local order = {}
  for _, entry_id in ipairs(ids) do
    local ms, seq = string.match(entry_id, '^(%d+)-(%d+)$')
    order[entry_id] = {tonumber(ms) or 0, tonumber(seq) or 0}
  end
  table.sort(ids, function(a, b)
    local x, y = order[a], order[b]
    if x[1] ~= y[1] then return x[1] < y[1] end
    return x[2] < y[2]
  end)
end
local result = {}
for _, entry_id in ipairs(ids) do
  local found = rcall('XRANGE', k.audit, entry_id, entry_id)
  if #found == 1 then result[#result + 1] = found[1] end
end
return result
