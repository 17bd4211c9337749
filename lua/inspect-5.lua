-- inspect: reads one job without changing anything (not a transition).
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] leased  KEYS[4] tokens  KEYS[5] dead
-- ARGV[1..4] common (see _lib.lua; now_ms and trim are unused)   ARGV[5] member
-- Returns: {} when there is no job, else {state, record (msgpack), token or '', deadline_ms or -1,
-- dead_since_ms or -1}.
-- Events: none.
-- Publishes: nothing.
-- @include _lib.lua
-- @include _remove.lua
local k = {jobs = KEYS[1], delayed = KEYS[2], leased = KEYS[3], tokens = KEYS[4], dead = KEYS[5]}
local member = ARGV[5]
local state = job_state(k, member)
if not state then return {} end
local token = rcall('HGET', k.tokens, member) or ''
local deadline = rcall('ZSCORE', k.leased, member)
local dead_since = rcall('ZSCORE', k.dead, member)
return {state, rcall('HGET', k.jobs, member), token, tonumber(deadline or -1),
        tonumber(dead_since or -1)}
