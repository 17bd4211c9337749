-- purge: deletes dead jobs for good.
-- KEYS[1] jobs  KEYS[2] dead  KEYS[3] counts  KEYS[4] audit
-- KEYS[5] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[6] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] n   ARGV[6..] n members
-- Returns: per member 1 purged, 0 not dead (left alone).
-- Events: purged {}.
-- Publishes: nothing.
-- @include _lib.lua
local k = {jobs = KEYS[1], dead = KEYS[2], counts = KEYS[3], audit = KEYS[4]}
use_history_index(KEYS[5], KEYS[6])
local n = tonumber(ARGV[5])
local result = {}
for j = 1, n do
  local member = ARGV[5 + j]
  if rcall('ZREM', k.dead, member) == 1 then
    local record = load_record(k.jobs, member)
    keep_added_entry(member, record)
    rcall('HDEL', k.jobs, member)
    count(k.counts, member, STATE_DEAD, -1)
    audit(k.audit, EVENT_PURGED, member, attempts_failed(record), {})
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
rotate_history_index()
return result
