-- A topic's gate, read by the lease script: its pause flag and limits, kept per shard in the
-- HASH <prefix>gates under "<topic>|paused" ("1"), "<topic>|rate" ("<n>/<per_ms>": this shard's
-- share of the namespace's rate), "<topic>|flight" (this shard's share of max_in_flight) and
-- "<topic>|tat" (the rate's theoretical arrival time, server ms).
-- The rate is a GCRA (generic cell rate algorithm): one job every per_ms / n, with a burst of a
-- tenth of n. It reads the server's TIME, the one clock every process of the namespace shares;
-- callers' clocks may be fake (tests, the simulator) or skewed, and a limit across processes
-- cannot trust any one of them. A job the gate holds back stays ready and counts no attempt.
-- @constant GATE_FLIGHT_POLL_MS
-- @include _lib.lua

-- What the gate lets through of `limit`: {allowed = n, ...}; allowed < 1 holds everything back.
local function open_gate(gates_key, counts_key, topic, limit)
  local raw = rcall('HMGET', gates_key, topic .. '|paused', topic .. '|rate', topic .. '|flight',
                    topic .. '|tat')
  local gate = {allowed = limit}
  if raw[1] then
    gate.allowed, gate.paused = 0, true
    return gate
  end
  if raw[3] then
    local in_flight = tonumber(rcall('HGET', counts_key, topic .. '|leased') or 0)
    gate.room = tonumber(raw[3]) - in_flight
    gate.allowed = math.min(gate.allowed, gate.room)
  end
  if raw[2] then
    local n, per_ms = string.match(raw[2], '^(%d+)/(%d+)$')
    n, per_ms = tonumber(n), tonumber(per_ms)
    local time = rcall('TIME')
    gate.now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
    gate.interval = per_ms / n
    gate.tau = (math.max(1, math.floor(n / 10)) - 1) * gate.interval
    gate.start = math.max(tonumber(raw[4] or 0), gate.now)
    local fits = math.floor((gate.tau - (gate.start - gate.now)) / gate.interval) + 1
    gate.allowed = math.min(gate.allowed, fits)
  end
  return gate
end

-- How long, in ms, until the gate lets one more job through once `passed` went: -1 paused (wait
-- for the resume notice), 0 now. A full in-flight limit has no time to wait for (another
-- process's ack frees it), so it is looked at again after GATE_FLIGHT_POLL_MS.
local function gate_wait_ms(gate, passed)
  if gate.paused then return -1 end
  local wait = 0
  if gate.room and gate.room - passed < 1 then wait = GATE_FLIGHT_POLL_MS end
  if gate.interval then
    local behind = gate.start + passed * gate.interval - gate.tau - gate.now
    if behind > 0 then wait = math.max(wait, math.ceil(behind)) end
  end
  return wait
end

-- Records the jobs that went through the rate.
local function gate_passed(gates_key, topic, gate, passed)
  if gate.interval and passed > 0 then
    rcall('HSET', gates_key, topic .. '|tat',
          string.format('%.3f', gate.start + passed * gate.interval))
  end
end
