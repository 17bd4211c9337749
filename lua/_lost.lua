-- Ends a lease that expired without a result: its consumer died (or hung past its deadline). A
-- lost lease is not a failed attempt: the attempt count stays, and the job goes back as a
-- suspect (record `u`), to be leased alone (lease-10.lua). Only a loss while the job ran as a
-- suspect is held against it (record `o`, the losses counted): then nothing else was handed to
-- its consumer, so the job itself most likely took its worker down. Once the topic's lost_max
-- losses are held against it (topic config `o`, else DEFAULT_LOST_MAX) the job is quarantined:
-- dead, with `q` set in its record. A job whose cancel was requested is removed instead.
-- `k` names the keys: jobs, delayed, leased, tokens, dead, topics, counts, audit.
-- `nth` numbers the leases one call ends (from 1): their due times are LOST_SPREAD_MS apart, so
-- the jobs one dead worker held are not all leased together again.
-- Returns the job's new state ('delayed', 'ready', 'dead' or 'cancelled') and the event written.
-- @include _lib.lua
-- @include _place.lua
-- @constant DEFAULT_LOST_MAX
-- @constant LOST_SPREAD_MS
-- @constant GATES_KEY
-- @constant SUSPECT_FIELD_SUFFIX
local function end_lost_lease(k, member, record, nth, wake_channel)
  local attempt = attempts_failed(record) + 1
  local topic = split_member(member)
  rcall('ZREM', k.leased, member)
  rcall('HDEL', k.tokens, member)
  count(k.counts, member, STATE_LEASED, -1)
  -- A suspect's record names the consumer it was leased to (`u`), whose mark goes with it.
  local holder = record[FIELD_SUSPECT]
  local as_suspect = type(holder) == 'string'
  if as_suspect then rcall('HDEL', prefix .. GATES_KEY, holder .. SUSPECT_FIELD_SUFFIX) end
  if record[FIELD_CANCEL] then
    keep_added_entry(member, record)
    rcall('HDEL', k.jobs, member)
    audit(k.audit, EVENT_CANCELLED, member, attempt, {'why', 'lease-expired', 'from', STATE_LEASED})
    return STATE_CANCELLED, EVENT_CANCELLED
  end
  local config = topic_config(k.topics, topic)
  local lost = tonumber(record[FIELD_LOST] or 0)
  if as_suspect then lost = lost + 1 end
  if lost > 0 then record[FIELD_LOST] = lost end
  if as_suspect and lost >= tonumber(config['o'] or DEFAULT_LOST_MAX) then
    record[FIELD_SUSPECT] = nil
    record[FIELD_QUARANTINED] = 1
    save_record(k.jobs, member, record)
    rcall('ZADD', k.dead, now_ms, member)
    count(k.counts, member, STATE_DEAD, 1)
    audit(k.audit, EVENT_QUARANTINED, member, attempt, {'why', 'lost', 'lost', lost})
    return STATE_DEAD, EVENT_QUARANTINED
  end
  record[FIELD_SUSPECT] = 1
  -- The delay the schedule gives after this attempt (its last one past the end), as a failure
  -- would wait: a job that kills its worker is not run again at once.
  local schedule = record[FIELD_RETRY] or config['r'] or {}
  local delay_ms = 0
  if #schedule > 0 then delay_ms = tonumber(schedule[math.min(attempt, #schedule)]) end
  local due_ms = now_ms + delay_ms + ((nth - 1) % 100) * LOST_SPREAD_MS
  record[FIELD_DUE] = due_ms
  save_record(k.jobs, member, record)
  local state = place(k.delayed, k.counts, member, due_ms, wake_channel, false)
  audit(k.audit, EVENT_LOST, member, attempt, {'due', due_ms, 'why', 'lease-expired', 'to', state,
                                           'lost', lost, 'counted', as_suspect and 1 or 0})
  return state, EVENT_LOST
end
