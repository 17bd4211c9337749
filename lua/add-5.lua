-- add: creates jobs, all or nothing.
-- KEYS[1] jobs (HASH member -> msgpack record)   KEYS[2] delayed (ZSET member -> due_ms)
-- KEYS[3] topics (HASH topic -> msgpack config)   KEYS[4] counts (HASH "topic|state" -> n)
-- KEYS[5] audit (STREAM)
-- ARGV[1..4] now_ms, trim kind, trim threshold, key prefix (see _lib.lua)
-- ARGV[5] wake channel   ARGV[6] n
-- ARGV[7..] n groups of 4: member, due_ms, record (msgpack), topic default config (msgpack)
-- Returns: {0} on success, or {-2, member...} listing members that already exist (nothing written).
-- Errors: -2 EXISTS.
-- Events: added {due, to=delayed|ready}. Touches ready lists <prefix>ready:<topic> (same hash tag).
-- @include _lib.lua
-- @include _place.lua
local k = {jobs = KEYS[1], delayed = KEYS[2], topics = KEYS[3], counts = KEYS[4], audit = KEYS[5]}
local wake_channel = ARGV[5]
local n = tonumber(ARGV[6])

local existing = {-2}
for j = 0, n - 1 do
  local member = ARGV[7 + j * 4]
  if rcall('HEXISTS', k.jobs, member) == 1 then existing[#existing + 1] = member end
end
if #existing > 1 then return existing end

for j = 0, n - 1 do
  local base = 7 + j * 4
  local member, due_ms, record = ARGV[base], tonumber(ARGV[base + 1]), ARGV[base + 2]
  local topic = split_member(member)
  rcall('HSETNX', k.topics, topic, ARGV[base + 3])
  rcall('HSET', k.jobs, member, record)
  local state = place(k.delayed, k.counts, member, due_ms, wake_channel, false)
  audit(k.audit, 'added', member, 1, {'due', due_ms, 'to', state})
end
return {0}
