-- ack: ends leased jobs successfully and deletes them.
-- KEYS[1] jobs  KEYS[2] leased  KEYS[3] tokens  KEYS[4] counts  KEYS[5] audit
-- KEYS[6] history (HASH: the audit stream's per-job index, see _lib.lua)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] n   ARGV[6..] n groups of 3: member, token, detail
-- (detail: free text kept in the event, e.g. an HTTP status; "" for none)
-- Returns: one code per job: 0 OK, -3 STALE_TOKEN, -4 NOT_LEASED.
-- Events: acked {tok, cancelled=1 when a cancel was requested meanwhile, detail};
-- rejected {op=ack}.
-- Publishes: nothing.
-- @include _lib.lua
-- @include _token.lua
local k = {jobs = KEYS[1], leased = KEYS[2], tokens = KEYS[3], counts = KEYS[4], audit = KEYS[5]}
use_history_index(KEYS[6])
local n = tonumber(ARGV[5])
local result = {}
for j = 0, n - 1 do
  local member, token, detail = ARGV[6 + j * 3], ARGV[7 + j * 3], ARGV[8 + j * 3]
  local code = check_token(k, member, token, 'ack')
  if code == 0 then
    local record = load_record(k.jobs, member)
    local fields = {'tok', token}
    if record['x'] then
      fields[#fields + 1] = 'cancelled'
      fields[#fields + 1] = 1
    end
    if detail ~= '' then
      fields[#fields + 1] = 'detail'
      fields[#fields + 1] = detail
    end
    rcall('HDEL', k.jobs, member)
    rcall('HDEL', k.tokens, member)
    rcall('ZREM', k.leased, member)
    count(k.counts, member, 'leased', -1)
    audit(k.audit, 'acked', member, attempts_failed(record) + 1, fields)
  end
  result[#result + 1] = code
end
forget_trimmed_histories()
return result
