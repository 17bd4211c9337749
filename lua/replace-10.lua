-- replace: creates or reschedules jobs. An existing job loses its place, attempt count and body;
-- a leased job's lease is revoked, so its consumer's ack, fail or extend is rejected as stale and
-- the job runs again at its new due time.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] leased  KEYS[4] tokens  KEYS[5] dead  KEYS[6] topics
-- KEYS[7] counts  KEYS[8] audit
-- KEYS[9] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[10] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] wake channel   ARGV[6] n
-- ARGV[7..] n groups of 4: member, due ("<ms>", or "+<delay ms>" counted from now: _due.lua),
--          record (msgpack), topic default config (msgpack)
-- Returns: a list with, per job, the state it had before ('new' when it did not exist).
-- A job stored with the very record sent (created ms included) is left as it is, and its state
-- now is returned: this call is a resend of one that ran and whose reply was lost, and replacing
-- again would revoke a lease taken since and run the job twice.
-- Events: replaced {due, to, was} for an existing job, added {due, to} for a new one.
-- Touches ready lists <prefix>ready:<topic> (same hash tag).
-- Publishes: on <prefix>wake (ARGV[5]; "" for none), a due time when it is earlier than every
-- delayed job; on <prefix>ready, a topic whose ready list was empty.
-- @include _lib.lua
-- @include _place.lua
-- @include _remove.lua
-- @include _due.lua
local k = {jobs = KEYS[1], delayed = KEYS[2], leased = KEYS[3], tokens = KEYS[4], dead = KEYS[5],
           topics = KEYS[6], counts = KEYS[7], audit = KEYS[8]}
use_history_index(KEYS[9], KEYS[10])
local wake_channel = ARGV[5]
local n = tonumber(ARGV[6])
local result = {}
for j = 0, n - 1 do
  local base = 7 + j * 4
  local member, record = ARGV[base], ARGV[base + 2]
  local due_ms, due_text, delayed_by = sent_due(ARGV[base + 1])
  local topic = split_member(member)
  rcall('HSETNX', k.topics, topic, ARGV[base + 3])
  local stored = rcall('HGET', k.jobs, member)
  if stored and same_sent_record(stored, record, delayed_by) then
    result[#result + 1] = job_state(k, member, stored)
  else
    local was = unlink(k, member, stored)
    if stored then keep_added_entry(member, cmsgpack.unpack(stored)) end
    if delayed_by then record = record_with_due(record, due_ms) end
    rcall('HSET', k.jobs, member, record)
    local state = place(k.delayed, k.counts, member, due_ms, wake_channel, false)
    if was then
      audit(k.audit, EVENT_REPLACED, member, 1, {'due', due_text, 'to', state, 'was', was})
    else
      audit(k.audit, EVENT_ADDED, member, 1, {'due', due_text, 'to', state})
    end
    result[#result + 1] = was or STATE_NEW
  end
end
rotate_history_index()
return result
