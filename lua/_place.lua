-- Puts a job where its due time says: straight onto its topic's ready list when it is already due,
-- otherwise into the delayed set. When a delayed job becomes the earliest one, the carriers of
-- every process are told on the wake channel so they can shorten their sleep; when a ready list
-- was empty, its listeners are told on the ready channel.
-- Returns the state the job is now in.
-- @include _lib.lua
-- @include _delayed.lua
local function place(delayed_key, counts_key, member, due_ms, wake_channel, front)
  if due_ms <= now_ms then
    local topic = split_member(member)
    local length
    if front then
      length = rcall('LPUSH', ready_key(topic), member)
    else
      length = rcall('RPUSH', ready_key(topic), member)
    end
    if length == 1 then ready_notice(topic) end
    count(counts_key, member, STATE_READY, 1)
    return STATE_READY
  end
  local earliest, first_bucket = delayed_first_bucket_due(delayed_key)
  delayed_insert(delayed_key, {{due_ms, integer_text(due_ms), member}}, first_bucket)
  count(counts_key, member, STATE_DELAYED, 1)
  if wake_channel ~= '' and (earliest == nil or due_ms < earliest) then
    rcall('PUBLISH', wake_channel, due_ms)
  end
  return STATE_DELAYED
end
