-- release: gives leased jobs back without counting an attempt (graceful shutdown, a job fetched
-- but never started). They go to the front of their ready list so they are next.
-- KEYS[1] jobs  KEYS[2] leased  KEYS[3] tokens  KEYS[4] counts  KEYS[5] audit
-- KEYS[6] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[7] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] n   ARGV[6..] n groups of 2: member, token
-- Returns: per job 0 OK (or 1 when the job was removed because its cancel was requested),
-- -3 STALE_TOKEN, -4 NOT_LEASED.
-- Events: released {tok}, or cancelled {why=released, from=leased}; rejected {op=release}.
-- Touches ready lists <prefix>ready:<topic> (same hash tag).
-- Publishes: on <prefix>ready, a topic whose ready list was empty.
-- @include _lib.lua
-- @include _token.lua
local k = {jobs = KEYS[1], leased = KEYS[2], tokens = KEYS[3], counts = KEYS[4], audit = KEYS[5]}
use_history_index(KEYS[6], KEYS[7])
local n = tonumber(ARGV[5])
local result = {}
for j = 0, n - 1 do
  local member, token = ARGV[6 + j * 2], ARGV[7 + j * 2]
  local code = check_token(k, member, token, 'release')
  if code == CODE_OK then
    local record = load_record(k.jobs, member)
    local attempt = attempts_failed(record) + 1
    rcall('ZREM', k.leased, member)
    rcall('HDEL', k.tokens, member)
    count(k.counts, member, STATE_LEASED, -1)
    if record[FIELD_CANCEL] then
      keep_added_entry(member, record)
      rcall('HDEL', k.jobs, member)
      audit(k.audit, EVENT_CANCELLED, member, attempt, {'why', 'released', 'from', STATE_LEASED})
      code = 1
    else
      local topic = split_member(member)
      if rcall('LPUSH', ready_key(topic), member) == 1 then ready_notice(topic) end
      count(k.counts, member, STATE_READY, 1)
      audit(k.audit, EVENT_RELEASED, member, attempt, {'tok', token})
    end
  end
  result[#result + 1] = code
end
rotate_history_index()
return result
