-- refill: appends occurrence times to a schedule, and makes its pending occurrence when it has
-- none (its stored times ran dry before a refill came).
-- KEYS[1] schedules  KEYS[2] jobs  KEYS[3] delayed  KEYS[4] counts  KEYS[5] audit
-- KEYS[6] history (HASH: the audit stream's per-job index, see _lib.lua)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] wake channel   ARGV[6] name
-- ARGV[7] generation the times were computed for
-- ARGV[8..] occurrence times (ms, ascending); only those after every stored one are kept
-- Returns: how many times were appended; -1 when the schedule is gone or was changed since
-- (another generation), so the times are stale.
-- Events: added {due, to, schedule} when it makes the pending occurrence.
-- Touches ready lists <prefix>ready:<topic> (same hash tag).
-- Publishes: on <prefix>wake (ARGV[5]), an occurrence earlier than every delayed job; on <prefix>ready, a
-- topic whose ready list was empty.
-- @include _lib.lua
-- @include _schedule.lua
-- @include _arm.lua
local k = {schedules = KEYS[1], jobs = KEYS[2], delayed = KEYS[3], counts = KEYS[4],
           audit = KEYS[5]}
use_history_index(KEYS[6])
local wake_channel = ARGV[5]
local name, generation = ARGV[6], tonumber(ARGV[7])
local schedule = load_schedule(k.schedules, name)
if not schedule or tonumber(schedule['g']) ~= generation then return -1 end
local times = schedule['q'] or {}
local last = -1
if #times > 0 then last = tonumber(times[#times]) end
if schedule['p'] then
  last = math.max(last, tonumber(string.match(schedule['p'], ':(%d+)$')))
end
local appended = 0
for j = 8, #ARGV do
  local at = tonumber(ARGV[j])
  if at > last then
    times[#times + 1] = at
    last = at
    appended = appended + 1
  end
end
schedule['q'] = times
if schedule['p'] then
  save_schedule(k.schedules, name, schedule)
else
  arm_next(k, name, schedule, 0, wake_channel)
end
return appended
