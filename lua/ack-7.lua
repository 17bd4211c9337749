-- ack: ends leased jobs successfully and deletes them.
-- KEYS[1] jobs  KEYS[2] leased  KEYS[3] tokens  KEYS[4] counts  KEYS[5] audit
-- KEYS[6] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[7] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] n   ARGV[6..] n groups of 3: member, token, detail
-- (detail: free text kept in the event, e.g. an HTTP status; "" for none)
-- Returns: one code per job: 0 OK, -3 STALE_TOKEN, -4 NOT_LEASED.
-- Events: acked {tok, cancelled=1 when a cancel was requested meanwhile, detail};
-- rejected {op=ack}.
-- Publishes: nothing.
-- @include _lib.lua
local k = {jobs = KEYS[1], leased = KEYS[2], tokens = KEYS[3], counts = KEYS[4], audit = KEYS[5]}
use_history_index(KEYS[6], KEYS[7])
buffer_history_index()
local n = tonumber(ARGV[5])
-- Batched: the tokens and records are read with one HMGET each and the deletes and counters
-- written once per batch (in slices), not one command per job; most of a script's time goes to
-- each redis.call's conversions and the interpreter. The audit entry stays one per job. The
-- result is the one acking the jobs one after another gives: a job acked earlier in this call
-- has no token and no record any more, so a repeat of it is rejected as NOT_LEASED.
local members = {}
for j = 0, n - 1 do members[j + 1] = ARGV[6 + j * 3] end
local current_tokens, blobs = hmget_each_slice(k.tokens, members), hmget_each_slice(k.jobs, members)
local acked, ended, leased_by_topic = {}, {}, {}
local result = {}
local fields = {'tok'}  -- one table for every acked event; audit writes its first `used` values
for j = 1, n do
  local member, token, detail = members[j], ARGV[4 + j * 3], ARGV[5 + j * 3]
  local current, blob = current_tokens[j], blobs[j]
  if acked[member] then current, blob = false, false end
  local record = blob and cmsgpack.unpack(blob) or nil
  local code = CODE_OK
  if current ~= token then
    -- What check_token (_token.lua) does, from the values read above.
    code = CODE_NOT_LEASED
    if current then code = CODE_STALE_TOKEN end
    local attempt = 0
    if record then attempt = attempts_failed(record) + 1 end
    audit(k.audit, EVENT_REJECTED, member, attempt, {'op', 'ack', 'tok', token, 'code', code})
  else
    record = record or {}  -- a token without a record is drift; end the job all the same
    local used = 2
    fields[2] = token
    if record[FIELD_CANCEL] then
      -- '1' is what redis.call makes of the number 1, without formatting it each time.
      fields[used + 1], fields[used + 2] = 'cancelled', '1'
      used = used + 2
    end
    if detail ~= '' then
      fields[used + 1], fields[used + 2] = 'detail', detail
      used = used + 2
    end
    acked[member] = true
    ended[#ended + 1] = member
    local topic = split_member(member)
    leased_by_topic[topic] = (leased_by_topic[topic] or 0) - 1
    keep_added_entry(member, record)
    audit(k.audit, EVENT_ACKED, member, attempts_failed(record) + 1, fields, used)
  end
  result[j] = code
end
rcall_each_slice('HDEL', k.jobs, ended)
rcall_each_slice('HDEL', k.tokens, ended)
rcall_each_slice('ZREM', k.leased, ended)
for topic, delta in pairs(leased_by_topic) do
  rcall('HINCRBY', k.counts, topic .. '|leased', delta)
end
flush_history_index()
rotate_history_index()
return result
