-- Drops a schedule's pending occurrence that is still delayed, with a `cancelled` event {why}
-- (one already ready or leased runs). `k` holds the keys jobs, delayed, counts and audit.
-- `taken`: the job's record, when the caller has already taken the job out of the delayed set
-- (carry, which read the record too).
-- @include _lib.lua
-- @include _delayed.lua
local function drop_delayed(k, member, why, taken)
  if not member then return end
  local record = taken
  if not record then
    record = load_record(k.jobs, member)
    if not (record and delayed_remove(k.delayed, member, tonumber(record[FIELD_DUE]))) then return end
  end
  keep_added_entry(member, record)  -- a job add-6 made under this name
  rcall('HDEL', k.jobs, member)
  count(k.counts, member, STATE_DELAYED, -1)
  audit(k.audit, EVENT_CANCELLED, member, 1, {'why', why, 'from', STATE_DELAYED})
end
