-- Ends one failed attempt of a leased job (its handler failed; an expired lease is _lost.lua's).
-- A failure clears a suspect's suspicion (record `u`): the job ran to an end, its worker lived.
-- `k` names the keys: jobs, delayed, leased, tokens, dead, topics, counts, audit.
-- `override_ms` < 0 means "use the schedule". `trace` is the failure's traceback ("" for none): the
-- record keeps the last one (`t`, dropped when an attempt fails without one) and the failed or dead
-- event carries it (`tb`, only when not empty).
-- Attempt n (1-based) that fails is retried schedule[n] ms later; past the end of the schedule the
-- job is dead. A job whose cancel was requested while it was leased is removed instead.
-- Returns the job's new state: 'delayed', 'ready', 'dead' or 'cancelled'.
-- @include _lib.lua
-- @include _place.lua
local function end_failed_attempt(k, member, record, event, reason, override_ms, wake_channel,
                                  trace)
  local attempt = attempts_failed(record) + 1
  local topic = split_member(member)
  rcall('ZREM', k.leased, member)
  rcall('HDEL', k.tokens, member)
  count(k.counts, member, STATE_LEASED, -1)
  if record[FIELD_CANCEL] then
    keep_added_entry(member, record)
    rcall('HDEL', k.jobs, member)
    audit(k.audit, EVENT_CANCELLED, member, attempt, {'why', reason, 'from', STATE_LEASED})
    return STATE_CANCELLED
  end
  local schedule = record[FIELD_RETRY] or topic_config(k.topics, topic)['r'] or {}
  record[FIELD_ATTEMPTS] = attempt
  record[FIELD_SUSPECT] = nil
  local trace_field = {}
  if trace ~= '' then
    record[FIELD_TRACE] = trace
    trace_field = {'tb', trace}
  else
    record[FIELD_TRACE] = nil
  end
  if attempt > #schedule then
    save_record(k.jobs, member, record)
    rcall('ZADD', k.dead, now_ms, member)
    count(k.counts, member, STATE_DEAD, 1)
    audit(k.audit, EVENT_DEAD, member, attempt, {'why', reason, 'via', event, unpack(trace_field)})
    return STATE_DEAD
  end
  local delay_ms = tonumber(schedule[attempt])
  if override_ms >= 0 then delay_ms = override_ms end
  local due_ms = now_ms + delay_ms
  record[FIELD_DUE] = due_ms
  save_record(k.jobs, member, record)
  local state = place(k.delayed, k.counts, member, due_ms, wake_channel, false)
  audit(k.audit, event, member, attempt, {'due', due_ms, 'why', reason, 'to', state,
                                          unpack(trace_field)})
  return state
end
