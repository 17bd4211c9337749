-- unschedule: deletes a schedule and its pending occurrence when that is still delayed (an
-- occurrence already ready or leased runs).
-- KEYS[1] schedules  KEYS[2] jobs  KEYS[3] delayed  KEYS[4] counts  KEYS[5] audit
-- KEYS[6] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[7] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] name
-- Returns: 1 when the schedule existed, 0 when not.
-- Events: cancelled {why=unscheduled, from=delayed} for the dropped occurrence.
-- Publishes: nothing.
-- @include _lib.lua
-- @include _schedule.lua
-- @include _drop.lua
local k = {schedules = KEYS[1], jobs = KEYS[2], delayed = KEYS[3], counts = KEYS[4],
           audit = KEYS[5]}
use_history_index(KEYS[6], KEYS[7])
local name = ARGV[5]
local schedule = load_schedule(k.schedules, name)
if not schedule then return 0 end
drop_delayed(k, schedule['p'], 'unscheduled')
rcall('HDEL', k.schedules, name)
rotate_history_index()
return 1
