-- Making a schedule's next occurrence (see _schedule.lua for the schedule record).
-- @include _lib.lua
-- @include _place.lua
-- @include _schedule.lua
-- @constant MISFIRE_GRACE_MS
-- @constant REFILL_BELOW

-- Makes the schedule's next occurrence: the first stored time after both `after_ms` and now, so
-- the slots missed while nothing carried are skipped (misfire); when every stored time has
-- passed, an `every` schedule's next slot on its grid, a cron schedule none (a refill makes it). Saves the schedule; returns the pending member or nil.
-- `k` holds the keys jobs, delayed, counts, audit and schedules; `wake_channel` as for place.
local function arm_next(k, name, schedule, after_ms, wake_channel)
  local times = schedule['q'] or {}
  local floor = math.max(after_ms, now_ms)
  local i = 1
  while i <= #times and tonumber(times[i]) <= floor do i = i + 1 end
  local at = times[i]
  local rest = {}
  for j = i + 1, #times do rest[#rest + 1] = times[j] end
  schedule['q'] = rest
  schedule['p'] = nil
  local spec = cmsgpack.unpack(schedule['spec'])
  if not at and spec['e'] then
    -- Every stored time has passed (a long downtime): an `every` schedule's next slot on its
    -- grid needs no cron, so it never waits for a refill. A cron schedule does.
    local every, anchor = tonumber(spec['e']), tonumber(schedule['a'])
    at = anchor + (math.floor((floor - anchor) / every) + 1) * every
  end
  if at then
    at = tonumber(at)
    local member = occurrence_member(spec['t'], name, at)
    if rcall('HEXISTS', k.jobs, member) == 0 then
      local record = {[FIELD_BODY] = spec['b'], [FIELD_DUE] = at, [FIELD_ATTEMPTS] = 0,
                      [FIELD_CREATED] = now_ms, [FIELD_SCHEDULE] = name}
      rcall('HSET', k.jobs, member, cmsgpack.pack(record))
      local state = place(k.delayed, k.counts, member, at, wake_channel, false)
      audit(k.audit, EVENT_ADDED, member, 1, {'due', at, 'to', state, 'schedule', name})
    end
    schedule['p'] = member
  end
  save_schedule(k.schedules, name, schedule)
  return schedule['p']
end

-- Carry found `member` due at `due_ms`, an occurrence of schedule record['s']. Returns the
-- schedule when `member` is its pending occurrence (else nil: an older occurrence being retried,
-- or its schedule is gone), and whether to drop the occurrence (misfire "skip", later than the
-- grace). The caller moves or drops it, then calls occurrence_moved_on.
local function pending_occurrence(k, member, record, due_ms)
  local schedule = load_schedule(k.schedules, record[FIELD_SCHEDULE])
  if not schedule or schedule['p'] ~= member then return nil, false end
  local spec = cmsgpack.unpack(schedule['spec'])
  return schedule, spec['m'] == 'skip' and now_ms - due_ms > MISFIRE_GRACE_MS
end

-- Makes the next occurrence of a schedule whose pending one (due at `due_ms`) was just moved on.
-- Returns whether the schedule's stored times ran low (then the caller asks for a refill).
local function occurrence_moved_on(k, name, schedule, due_ms, wake_channel)
  arm_next(k, name, schedule, due_ms, wake_channel)
  return #schedule['q'] < REFILL_BELOW
end
