-- Takes a job out of whichever structure holds it, without deleting its record.
-- `k` names jobs, delayed, leased, tokens, dead, counts.
-- Returns the state it was in ('delayed', 'ready', 'leased', 'dead') or nil if there is no job.
-- @include _lib.lua
-- @include _delayed.lua
-- `record`, when given, is the job's record as the caller already read it, packed or unpacked
-- (false: none), which spares reading it again. Its due time (`d`) finds the job's bucket in the
-- delayed set.
local function job_state(k, member, record)
  if record == nil then record = load_record(k.jobs, member) end
  if not record then return nil end
  if type(record) == 'string' then record = cmsgpack.unpack(record) end
  if delayed_has(k.delayed, member, tonumber(record[FIELD_DUE])) then return STATE_DELAYED, record end
  if rcall('HEXISTS', k.tokens, member) == 1 then return STATE_LEASED end
  if rcall('ZSCORE', k.dead, member) then return STATE_DEAD end
  return STATE_READY
end

local function unlink(k, member, record)
  local state
  state, record = job_state(k, member, record)
  if state == STATE_DELAYED then
    delayed_remove(k.delayed, member, tonumber(record[FIELD_DUE]))
  elseif state == STATE_LEASED then
    rcall('ZREM', k.leased, member)
    rcall('HDEL', k.tokens, member)
  elseif state == STATE_DEAD then
    rcall('ZREM', k.dead, member)
  elseif state == STATE_READY then
    local topic = split_member(member)
    -- O(length of the ready list); ready lists are short because listeners drain them.
    rcall('LREM', ready_key(topic), '1', member)
  end
  if state then count(k.counts, member, state, -1) end
  return state
end
