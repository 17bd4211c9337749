-- lease: hands up to `limit` ready jobs of one topic to a consumer, oldest first.
-- KEYS[1] ready list of the topic  KEYS[2] jobs  KEYS[3] leased (ZSET member -> lease deadline ms)
-- KEYS[4] tokens (HASH member -> lease token)  KEYS[5] topics  KEYS[6] counts  KEYS[7] seq (STRING)
-- KEYS[8] audit  KEYS[9] gates (HASH: the topic's pause flag and limits, see _gate.lua)
-- KEYS[10] history (HASH: the audit stream's per-job index, see _lib.lua)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] topic   ARGV[6] limit   ARGV[7] consumer name
-- Returns: a flat list: first the wait, 0 when no gate held jobs back, -1 when the topic is
-- paused (wait for its resume notice), else the ms until its limits let another job go; then per
-- leased job: member, token, deadline_ms, record (msgpack).
-- The lease lasts the job's lease_ms (record `l`, else the topic's `l`, else DEFAULT_LEASE_MS).
-- Tokens are "<now_ms>-<seq>", unique even if the counter is lost with the data.
-- Events: leased {tok, dl, by}.
-- Publishes: on <prefix>ready, the topic when jobs are left behind (this consumer was full; another
-- may have room), never when the topic's gate held them back (every consumer would be refused).
-- The gate: a paused topic leases nothing; its rate and in-flight limits (same for every process
-- of the namespace) cut `limit` down, measured with the server's TIME (see _gate.lua).
-- @include _lib.lua
-- @include _gate.lua
-- @constant DEFAULT_LEASE_MS
local k = {ready = KEYS[1], jobs = KEYS[2], leased = KEYS[3], tokens = KEYS[4], topics = KEYS[5],
           counts = KEYS[6], seq = KEYS[7], audit = KEYS[8], gates = KEYS[9]}
use_history_index(KEYS[10])
local topic, limit, consumer = ARGV[5], tonumber(ARGV[6]), ARGV[7]
local result = {0}
if limit < 1 then return result end
local gate = open_gate(k.gates, k.counts, topic, limit)
if gate.allowed < 1 then
  result[1] = gate_wait_ms(gate, 0)
  return result
end
local members = rcall('LPOP', k.ready, gate.allowed)
if not members then return result end
if #members == gate.allowed and gate.allowed < limit then
  -- Held back by the gate: the caller waits, and no other consumer is woken to be refused too.
  result[1] = gate_wait_ms(gate, #members)
elseif #members == limit and rcall('LLEN', k.ready) > 0 then
  ready_notice(topic)
end
gate_passed(k.gates, topic, gate, #members)
local last_seq = rcall('INCRBY', k.seq, #members)
local topic_lease_ms = topic_config(k.topics, topic)['l'] or DEFAULT_LEASE_MS
-- The records are read with one HMGET and the tokens and deadlines written with one HSET and one
-- ZADD per slice of the batch, not one command per job: most of a script's time goes to each
-- redis.call's conversions and the interpreter, not to the commands' own work. The audit entry
-- (one per job, as every transition writes) is the one per-job call left.
local records = {}
for first = 1, #members, 1000 do
  local slice = rcall('HMGET', k.jobs, unpack(members, first, math.min(first + 999, #members)))
  for j = 1, #slice do records[first + j - 1] = slice[j] end
end
local token_args, deadline_args = {}, {}
local leased = 0
for j, member in ipairs(members) do
  local blob = records[j]
  -- A member without a record can only come from a bug or a hand edit; failing here would drop
  -- the rest of the popped batch from every structure, so skip it (`redelay verify` shows the
  -- job as drift: the audit stream says ready, Redis has nothing).
  if blob then
    leased = leased + 1
    local record = cmsgpack.unpack(blob)
    local deadline = now_ms + tonumber(record['l'] or topic_lease_ms)
    local token = now_ms .. '-' .. (last_seq - #members + j)
    token_args[#token_args + 1] = member
    token_args[#token_args + 1] = token
    deadline_args[#deadline_args + 1] = deadline
    deadline_args[#deadline_args + 1] = member
    audit(k.audit, 'leased', member, attempts_failed(record) + 1,
          {'tok', token, 'dl', deadline, 'by', consumer})
    result[#result + 1] = member
    result[#result + 1] = token
    result[#result + 1] = deadline
    result[#result + 1] = blob
  end
end
-- Slices of 1000 values are 500 whole pairs each.
rcall_each_slice('HSET', k.tokens, token_args)
rcall_each_slice('ZADD', k.leased, deadline_args)
rcall('HINCRBY', k.counts, topic .. '|ready', -#members)
rcall('HINCRBY', k.counts, topic .. '|leased', leased)
return result
