-- expire: recovers leases whose deadline has passed (the consumer crashed or hung); each is a lost
-- lease, not a failed attempt: the job goes back as a suspect, or is quarantined once enough
-- losses are held against it (see _lost.lua).
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] leased  KEYS[4] tokens  KEYS[5] dead  KEYS[6] topics
-- KEYS[7] counts  KEYS[8] audit
-- KEYS[9] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[10] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] wake channel   ARGV[6] limit
-- A lease is expired when its deadline_ms <= now_ms.
-- Returns: {expired_count, next_deadline_ms or -1, now_ms (the time judged by), then per topic and
-- event: topic, event, jobs}; expired_count counts every lease this call ended, including one
-- whose record is gone: that lease is dropped (leased, tokens, counts) with no event (and is in
-- no topic's tally).
-- Events: lost {due, why=lease-expired, to, lost, counted} or quarantined {why=lost, lost}
-- or cancelled {why=lease-expired, from=leased}. Touches ready lists <prefix>ready:<topic> and,
-- for a suspect, its consumer's mark in <prefix>gates (HDEL only: it creates no key).
-- Publishes: on <prefix>wake (ARGV[5]; "" for none), a retry's due time when it is earlier than
-- every delayed job; on <prefix>ready, a topic whose ready list was empty (a retry due at once).
-- @include _lib.lua
-- @include _lost.lua
local k = {jobs = KEYS[1], delayed = KEYS[2], leased = KEYS[3], tokens = KEYS[4], dead = KEYS[5],
           topics = KEYS[6], counts = KEYS[7], audit = KEYS[8]}
use_history_index(KEYS[9], KEYS[10])
buffer_history_index()
local wake_channel = ARGV[5]
local limit = tonumber(ARGV[6])
local members = rcall('ZRANGEBYSCORE', k.leased, '-inf', now_ms_text, 'LIMIT', '0', limit)
local tally, tallied = {}, {}  -- "<topic>|<event>" -> jobs, and those keys in order
for nth, member in ipairs(members) do
  local record = load_record(k.jobs, member)
  if record then
    local _, event = end_lost_lease(k, member, record, nth, wake_channel)
    local key = split_member(member) .. '|' .. event
    if not tally[key] then tallied[#tallied + 1] = key end
    tally[key] = (tally[key] or 0) + 1
  else
    -- Only a bug or a hand edit deletes a leased job's record. Failing here would leave this lease
    -- first in line for every later call, so no lease would ever expire again; drop it instead.
    -- No event: no job is left to have one (`redelay verify` shows it as drift).
    rcall('ZREM', k.leased, member)
    rcall('HDEL', k.tokens, member)
    count(k.counts, member, STATE_LEASED, -1)
  end
end
local earliest = rcall('ZRANGE', k.leased, '0', '0', 'WITHSCORES')
local next_deadline = -1
if #earliest > 0 then next_deadline = tonumber(earliest[2]) end
flush_history_index()
rotate_history_index()
local result = {#members, next_deadline, now_ms_text}
for _, key in ipairs(tallied) do
  local topic, event = split_member(key)
  result[#result + 1], result[#result + 2], result[#result + 3] = topic, event, tally[key]
end
return result
