-- Making a schedule's next occurrence (see _schedule.lua for the schedule record).
-- @include _lib.lua
-- @include _place.lua
-- @include _schedule.lua
-- @constant MISFIRE_GRACE_MS
-- @constant REFILL_BELOW

-- Makes the schedule's next occurrence: the first stored time after both `after_ms` and now, so
-- the slots missed while nothing carried are skipped (misfire), or none when the list ran dry
-- (then a refill makes it). Saves the schedule; returns the pending member or nil.
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
  if at then
    at = tonumber(at)
    local spec = cmsgpack.unpack(schedule['spec'])
    local member = occurrence_member(spec['t'], name, at)
    if rcall('HEXISTS', k.jobs, member) == 0 then
      rcall('HSET', k.jobs, member, cmsgpack.pack({b = spec['b'], d = at, a = 0, n = now_ms, s = name}))
      local state = place(k.delayed, k.counts, member, at, wake_channel, false)
      audit(k.audit, 'added', member, 1, {'due', at, 'to', state, 'schedule', name})
    end
    schedule['p'] = member
  end
  save_schedule(k.schedules, name, schedule)
  return schedule['p']
end

-- Carry found `member` due at `due_ms`, an occurrence of schedule record['s']. When it is the
-- schedule's pending occurrence, makes the next one. Returns whether to drop it (misfire "skip"
-- and later than the grace) and whether the schedule's stored times ran low.
local function occurrence_carried(k, member, record, due_ms, wake_channel)
  local name = record['s']
  local schedule = load_schedule(k.schedules, name)
  if not schedule or schedule['p'] ~= member then return false, false end
  local spec = cmsgpack.unpack(schedule['spec'])
  local drop = spec['m'] == 'skip' and now_ms - due_ms > MISFIRE_GRACE_MS
  arm_next(k, name, schedule, due_ms, wake_channel)
  return drop, #schedule['q'] < REFILL_BELOW
end
