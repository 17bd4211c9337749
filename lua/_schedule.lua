-- Recurring schedules: a schedule is a msgpack map in the shard's schedules hash, under its name:
--   spec  the user's schedule, msgpack (t topic, b body, m misfire, c cron, e every ms, z tz,
--         s start ms): compared as bytes, so scheduling the same thing again changes nothing
--   q     the next occurrence times (ms, ascending), computed by Python (Lua cannot read cron)
--   p     the member of the pending occurrence (absent while none is pending)
--   g     generation, bumped by every change of spec, so a refill computed before is refused
--   a     the grid's first time for an `every` schedule
-- An occurrence is an ordinary job "<topic>|@schedule:<name>:<ms>" whose record names its
-- schedule in `s`; its id is its time, so no two calls can make the same occurrence twice.
-- @include _lib.lua
-- @include _place.lua
-- @constant SCHEDULES_KEY
-- @constant WAKE_CHANNEL
-- @constant OCCURRENCE_ID_PREFIX
-- @constant MISFIRE_GRACE_MS
-- @constant REFILL_BELOW

local function load_schedule(schedules_key, name)
  local blob = rcall('HGET', schedules_key, name)
  if not blob then return nil end
  return cmsgpack.unpack(blob)
end

local function save_schedule(schedules_key, name, schedule)
  rcall('HSET', schedules_key, name, cmsgpack.pack(schedule))
end

local function occurrence_member(topic, name, at_ms)
  return topic .. '|' .. OCCURRENCE_ID_PREFIX .. name .. ':' .. string.format('%d', at_ms)
end

-- Makes the schedule's next occurrence: the first stored time after both `after_ms` and now, so
-- the slots missed while nothing carried are skipped (misfire), or none when the list ran dry
-- (then a refill makes it). Saves the schedule; returns the pending member or nil.
-- `k` holds the keys jobs, delayed, counts, audit and schedules.
local function arm_next(k, name, schedule, after_ms)
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
      local state = place(k.delayed, k.counts, member, at, prefix .. WAKE_CHANNEL, false)
      audit(k.audit, 'added', member, 1, {'due', at, 'to', state, 'schedule', name})
    end
    schedule['p'] = member
  end
  save_schedule(k.schedules, name, schedule)
  return schedule['p']
end

-- Removes a pending occurrence that is still delayed (one already ready or leased runs).
local function drop_delayed(k, member, why)
  if not member or not rcall('ZSCORE', k.delayed, member) then return end
  rcall('ZREM', k.delayed, member)
  rcall('HDEL', k.jobs, member)
  count(k.counts, member, 'delayed', -1)
  audit(k.audit, 'cancelled', member, 1, {'why', why})
end

-- Carry found `member` due at `due_ms`, an occurrence of schedule record['s']. When it is the
-- schedule's pending occurrence, makes the next one. Returns whether to drop it (misfire "skip"
-- and later than the grace) and whether the schedule's stored times ran low.
local function occurrence_carried(k, member, record, due_ms)
  local name = record['s']
  local schedule = load_schedule(k.schedules, name)
  if not schedule or schedule['p'] ~= member then return false, false end
  local spec = cmsgpack.unpack(schedule['spec'])
  local drop = spec['m'] == 'skip' and now_ms - due_ms > MISFIRE_GRACE_MS
  arm_next(k, name, schedule, due_ms)
  return drop, #schedule['q'] < REFILL_BELOW
end
