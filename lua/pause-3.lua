-- pause: pauses or resumes one topic in this shard. A paused topic's ready jobs stay ready (due
-- jobs still become ready) and the lease script hands none out until it is resumed.
-- KEYS[1] gates (HASH, see _gate.lua)  KEYS[2] audit
-- KEYS[3] history (HASH: the audit stream's per-job index, see _lib.lua)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] topic   ARGV[6] "1" to pause, "0" to resume
-- Returns: 1 when the topic's state changed, 0 when it already was paused (resumed).
-- Events: paused {} or resumed {}, topic events: their id `i` is empty and `a` is 0; written
-- only when the state changes.
-- Publishes: on <prefix>ready, the topic when it is resumed (listeners waiting for it lease again).
-- @include _lib.lua
local k = {gates = KEYS[1], audit = KEYS[2]}
use_history_index(KEYS[3])
local topic, pause = ARGV[5], ARGV[6] == '1'
local field = topic .. '|paused'
if pause then
  if rcall('HSETNX', k.gates, field, '1') == 0 then return 0 end
  audit(k.audit, EVENT_PAUSED, topic .. '|', 0, {})
  return 1
end
if rcall('HDEL', k.gates, field) == 0 then return 0 end
audit(k.audit, EVENT_RESUMED, topic .. '|', 0, {})
ready_notice(topic)
return 1
