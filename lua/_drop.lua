-- Drops a schedule's pending occurrence that is still delayed, with a `cancelled` event {why}
-- (one already ready or leased runs). `k` holds the keys jobs, delayed, counts and audit.
-- @include _lib.lua
local function drop_delayed(k, member, why)
  if not member or not rcall('ZSCORE', k.delayed, member) then return end
  rcall('ZREM', k.delayed, member)
  keep_added_entry(member, load_record(k.jobs, member))  -- a job add-6 made under this name
  rcall('HDEL', k.jobs, member)
  count(k.counts, member, 'delayed', -1)
  audit(k.audit, 'cancelled', member, 1, {'why', why, 'from', 'delayed'})
end
