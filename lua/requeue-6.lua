-- requeue: gives dead jobs a fresh start: attempt count and losses reset (a quarantine lifted),
-- due now, onto their ready lists.
-- KEYS[1] jobs  KEYS[2] dead  KEYS[3] delayed  KEYS[4] counts  KEYS[5] audit
-- KEYS[6] history (HASH: the audit stream's per-job index, see _lib.lua)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] n   ARGV[6..] n members
-- Returns: per member 1 requeued, 0 not dead (left alone).
-- Events: requeued {due}. Touches ready lists <prefix>ready:<topic> (same hash tag).
-- Publishes: on <prefix>ready, a topic whose ready list was empty.
-- @include _lib.lua
-- @include _place.lua
local k = {jobs = KEYS[1], dead = KEYS[2], delayed = KEYS[3], counts = KEYS[4], audit = KEYS[5]}
use_history_index(KEYS[6])
local n = tonumber(ARGV[5])
local result = {}
for j = 1, n do
  local member = ARGV[5 + j]
  if rcall('ZREM', k.dead, member) == 1 then
    local record = load_record(k.jobs, member)
    record[FIELD_ATTEMPTS] = 0
    record[FIELD_LOST], record[FIELD_SUSPECT], record[FIELD_QUARANTINED] = nil, nil, nil
    record[FIELD_DUE] = now_ms
    save_record(k.jobs, member, record)
    count(k.counts, member, STATE_DEAD, -1)
    place(k.delayed, k.counts, member, now_ms, '', false)
    audit(k.audit, EVENT_REQUEUED, member, 1, {'due', now_ms})
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
return result
