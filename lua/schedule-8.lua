-- schedule: creates or updates a recurring schedule and makes its pending occurrence.
-- KEYS[1] schedules  KEYS[2] jobs  KEYS[3] delayed  KEYS[4] topics  KEYS[5] counts  KEYS[6] audit
-- KEYS[7] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[8] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] wake channel   ARGV[6] name
-- ARGV[7] spec (msgpack, see _schedule.lua)   ARGV[8] the grid's first time (every; 0 for cron)
-- ARGV[9] topic default config (msgpack)   ARGV[10..] the next occurrence times (ms, ascending)
-- Returns: {outcome, pending member or ""}; outcome "created", "updated", or "unchanged" when the
-- same spec is stored and its pending occurrence exists (every worker may schedule at start).
-- An update drops the pending occurrence when it is still delayed (a ready or leased one runs).
-- Events: added {due, to, schedule} for the occurrence; cancelled {why=rescheduled, from=delayed} for a
-- dropped one. Touches ready lists <prefix>ready:<topic> (same hash tag).
-- Publishes: on <prefix>wake (ARGV[5]), an occurrence earlier than every delayed job; on <prefix>ready, a
-- topic whose ready list was empty.
-- @include _lib.lua
-- @include _schedule.lua
-- @include _arm.lua
-- @include _drop.lua
local k = {schedules = KEYS[1], jobs = KEYS[2], delayed = KEYS[3], topics = KEYS[4],
           counts = KEYS[5], audit = KEYS[6]}
use_history_index(KEYS[7], KEYS[8])
local wake_channel = ARGV[5]
local name, spec_blob, anchor = ARGV[6], ARGV[7], tonumber(ARGV[8])
local old = load_schedule(k.schedules, name)
if old and old['spec'] == spec_blob and old['p'] and rcall('HEXISTS', k.jobs, old['p']) == 1 then
  return {'unchanged', old['p']}
end
local times = {}
for j = 10, #ARGV do times[#times + 1] = tonumber(ARGV[j]) end
local outcome = 'created'
local generation = 1
if old then
  outcome = 'updated'
  generation = tonumber(old['g']) + 1
  drop_delayed(k, old['p'], 'rescheduled')
end
local spec = cmsgpack.unpack(spec_blob)
rcall('HSETNX', k.topics, spec['t'], ARGV[9])
local schedule = {spec = spec_blob, q = times, g = generation, a = anchor}
local pending = arm_next(k, name, schedule, 0, wake_channel)
rotate_history_index()
return {outcome, pending or ''}
