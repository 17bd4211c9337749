-- extend: pushes the deadline of leases that are still held, so a long handler keeps its job.
-- KEYS[1] jobs  KEYS[2] leased  KEYS[3] tokens  KEYS[4] audit
-- KEYS[5] history (HASH: the audit stream's per-job index, see _lib.lua)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] n
-- ARGV[6..] n groups of 3: member, token, extend_ms (new deadline = now_ms + extend_ms)
-- Returns: per job, the new deadline_ms, or -3 STALE_TOKEN, -4 NOT_LEASED.
-- Events: extended {tok, dl}; rejected {op=extend}.
-- Publishes: nothing.
-- @include _lib.lua
-- @include _token.lua
local k = {jobs = KEYS[1], leased = KEYS[2], tokens = KEYS[3], audit = KEYS[4]}
use_history_index(KEYS[5])
local n = tonumber(ARGV[5])
local result = {}
for j = 0, n - 1 do
  local member, token = ARGV[6 + j * 3], ARGV[7 + j * 3]
  local deadline = now_ms + tonumber(ARGV[8 + j * 3])
  local code = check_token(k, member, token, 'extend')
  if code == CODE_OK then
    rcall('ZADD', k.leased, 'XX', deadline, member)
    local record = load_record(k.jobs, member)
    audit(k.audit, EVENT_EXTENDED, member, attempts_failed(record) + 1, {'tok', token, 'dl', deadline})
    result[#result + 1] = deadline
  else
    result[#result + 1] = code
  end
end
return result
