-- add: creates jobs, all or nothing.
-- KEYS[1] jobs (HASH member -> msgpack record)   KEYS[2] delayed (ZSET member -> due_ms)
-- KEYS[3] topics (HASH topic -> msgpack config)   KEYS[4] counts (HASH "topic|state" -> n)
-- KEYS[5] audit (STREAM)
-- KEYS[6] history (HASH: the audit stream's per-job index, see _lib.lua)
-- ARGV[1..4] now_ms, trim kind, trim threshold, key prefix (see _lib.lua)
-- ARGV[5] wake channel   ARGV[6] n
-- ARGV[7..] n groups of 4: member, due ("<ms>", or "+<delay ms>" counted from now: _due.lua),
--          record (msgpack), topic default config (msgpack)
-- Returns: {0} on success, or {-2, member...} listing members that already exist (nothing written).
-- Each record is stored with the id of its `added` entry appended (field h, see _lib.lua); the
-- history index gets no field for the job until its record goes.
-- A call whose every job already exists with the very record it sends returns {0} and writes
-- nothing: it is a resend of a call that ran (its reply was lost, and redis-py or the caller sent
-- it again), because a record holds its created ms as well as its body and due time.
-- Errors: -2 EXISTS.
-- Events: added {due, to=delayed|ready}. Touches ready lists <prefix>ready:<topic> (same hash tag).
-- Publishes: on <prefix>wake (ARGV[5]; "" for none), the earliest new due time when it is earlier
-- than every delayed job before the call; on <prefix>ready, a topic whose ready list was empty.
-- The whole batch is written with one HSET, one ZADD per bucket of the delayed set it falls in
-- and one RPUSH per topic (in slices), because per-job writes cost more than the audit entries
-- themselves (see docs/benchmarks.md).
-- @include _lib.lua
-- @include _delayed.lua
-- @include _due.lua
local k = {jobs = KEYS[1], delayed = KEYS[2], topics = KEYS[3], counts = KEYS[4], audit = KEYS[5]}
use_history_index(KEYS[6])
buffer_history_index()
local wake_channel = ARGV[5]
local n = tonumber(ARGV[6])

-- One HMGET per slice of 1000 members rather than one HEXISTS per job: a command per job costs
-- more than the check itself. A new job's field is missing (false), so nothing is copied for it.
local existing, resent = {CODE_EXISTS}, 0
for first = 0, n - 1, 1000 do
  local last = math.min(first + 999, n - 1)
  local members = {}
  for j = first, last do members[#members + 1] = ARGV[7 + j * 4] end
  local found = rcall('HMGET', k.jobs, unpack(members))
  for m = 1, #members do
    if found[m] then
      existing[#existing + 1] = members[m]
      local base = 7 + (first + m - 1) * 4
      local delayed = string.byte(ARGV[base + 1], 1) == 43  -- "+": sent as a delay
      if same_sent_record(found[m], ARGV[base + 2], delayed) then resent = resent + 1 end
    end
  end
end
-- Only the whole call counts as a resend: one job missing or changed (acked, failed since) makes
-- it a new add of existing jobs, refused as usual, so nothing runs twice.
if resent == n then return {CODE_OK} end
if #existing > 1 then return existing end

local earliest, first_bucket = delayed_first_bucket_due(k.delayed)
local records, delayed, ready_by_topic, counts = {}, {}, {}, {}
local min_new_due = nil
for j = 0, n - 1 do
  local base = 7 + j * 4
  local member = ARGV[base]
  local due_ms, due_text, delayed_by = sent_due(ARGV[base + 1])
  local sent = ARGV[base + 2]
  if delayed_by then sent = record_with_due(sent, due_ms) end
  local topic = split_member(member)
  if not counts[topic] then
    counts[topic] = {[STATE_READY] = 0, [STATE_DELAYED] = 0}
    ready_by_topic[topic] = {}
    rcall('HSETNX', k.topics, topic, ARGV[base + 3])
  end
  local state
  if due_ms <= now_ms then
    state = STATE_READY
    local list = ready_by_topic[topic]
    list[#list + 1] = member
  else
    state = STATE_DELAYED
    -- The due time as text: a Lua number would be formatted back to text (%.17g) per job.
    delayed[#delayed + 1] = {due_ms, due_text, member}
    if min_new_due == nil or due_ms < min_new_due then min_new_due = due_ms end
  end
  counts[topic][state] = counts[topic][state] + 1
  -- The due time as text, so Redis need not turn a Lua number back into text. The entry's id
  -- goes into the record, not the index (record_with_entry in _lib.lua).
  local entry_id = audit(k.audit, EVENT_ADDED, member, 1, {'due', due_text, 'to', state}, nil, true)
  local record = record_with_entry(sent, entry_id)
  if not record then
    record = sent
    index_id(member, entry_id)
  end
  records[#records + 1] = member
  records[#records + 1] = record
end

-- Slices of 1000 values keep unpack() under Lua's limit and pairs (field value, score member)
-- together.
rcall_each_slice('HSET', k.jobs, records)
delayed_insert(k.delayed, delayed, first_bucket)
for topic, list in pairs(ready_by_topic) do
  if #list > 0 then
    -- The list was empty when it now holds just these: RPUSH's length, not an LLEN before it.
    if rcall_each_slice('RPUSH', ready_key(topic), list) == #list then ready_notice(topic) end
  end
  for state, delta in pairs(counts[topic]) do
    if delta > 0 then rcall('HINCRBY', k.counts, topic .. '|' .. state, delta) end
  end
end
if wake_channel ~= '' and min_new_due ~= nil
    and (earliest == nil or min_new_due < earliest) then
  rcall('PUBLISH', wake_channel, min_new_due)
end
flush_history_index()
return {CODE_OK}
