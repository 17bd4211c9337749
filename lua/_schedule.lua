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
-- @constant OCCURRENCE_ID_PREFIX

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
