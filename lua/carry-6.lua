-- carry: moves due jobs from the delayed set to the end of their topics' ready lists.
-- KEYS[1] delayed  KEYS[2] jobs  KEYS[3] counts  KEYS[4] audit
-- KEYS[5] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[6] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] limit (most jobs moved by this call)
-- ARGV[6] wake channel (for a schedule's next occurrence; "" for none)
-- Returns: {moved, next_due_ms, now_ms, name...} where next_due_ms is the earliest due time still
-- delayed, or -1, now_ms the time the call judged by (the carrier sleeps the difference, by
-- the server's clock, not its own), and the names are schedules whose stored occurrence times ran
-- low (refill them).
-- A job is due when due_ms <= now_ms; jobs with equal due times move in member order.
-- A schedule's pending occurrence makes the schedule's next occurrence in the same call (see
-- _schedule.lua); with misfire "skip" one later than the grace is dropped instead of moved.
-- Events: ready {due}; added {due, to, schedule} for a schedule's next occurrence;
-- cancelled {why=misfire, from=delayed} for a dropped one.
-- Touches ready lists <prefix>ready:<topic> and <prefix>schedules (same hash tag).
-- Publishes: on <prefix>ready, a topic whose ready list was empty; on <prefix>wake (ARGV[6]), a
-- schedule's next occurrence when it is earlier than every delayed job.
-- @include _lib.lua
-- @include _arm.lua
-- @include _drop.lua
-- @include _delayed.lua
-- @constant SCHEDULES_KEY
local k = {delayed = KEYS[1], jobs = KEYS[2], counts = KEYS[3], audit = KEYS[4],
           schedules = prefix .. SCHEDULES_KEY}
use_history_index(KEYS[5], KEYS[6])
buffer_history_index()
local limit = tonumber(ARGV[5])
local wake_channel = ARGV[6]
-- Taken out of the delayed set first: each one is moved or dropped below, and a schedule's next
-- occurrence made on the way goes into the set while it is read.
local due = delayed_take_due(k.delayed, limit)
local by_topic = {}
local moved = {}
local low = {}
-- The records are read with one HMGET per slice, not an HGET per job (see hmget_each_slice).
local due_members = {}
for j = 1, #due, 2 do due_members[#due_members + 1] = due[j] end
local blobs = hmget_each_slice(k.jobs, due_members)
for j = 1, #due, 2 do
  local member = due[j]
  local due_ms = tonumber(due[j + 1])
  local blob = blobs[(j + 1) / 2]
  local record = blob and cmsgpack.unpack(blob) or nil
  local schedule, drop = nil, false
  if record and record[FIELD_SCHEDULE] then
    schedule, drop = pending_occurrence(k, member, record, due_ms)
  end
  if drop then
    drop_delayed(k, member, 'misfire', record)
  else
    local topic = split_member(member)
    local list = by_topic[topic]
    if not list then
      list = {}
      by_topic[topic] = list
    end
    list[#list + 1] = member
    moved[#moved + 1] = member
    audit(k.audit, EVENT_READY, member, attempts_failed(record) + 1, {'due', due[j + 1]})
  end
  -- After the current occurrence's event, so the stream never shows two pending at once.
  if schedule and occurrence_moved_on(k, record[FIELD_SCHEDULE], schedule, due_ms, wake_channel) then
    low[#low + 1] = record[FIELD_SCHEDULE]
  end
end
if #moved > 0 then
  for topic, list in pairs(by_topic) do
    -- The list was empty when it now holds just these: RPUSH's length, not an LLEN before it.
    if rcall_each_slice('RPUSH', ready_key(topic), list) == #list then ready_notice(topic) end
    rcall('HINCRBY', k.counts, topic .. '|delayed', -#list)
    rcall('HINCRBY', k.counts, topic .. '|ready', #list)
  end
end
local result = {#moved, delayed_earliest(k.delayed) or -1, now_ms_text}
for _, name in ipairs(low) do result[#result + 1] = name end
flush_history_index()
rotate_history_index()
return result
