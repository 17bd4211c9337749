-- lease: hands up to `limit` ready jobs of one topic to a consumer, oldest first.
-- KEYS[1] ready list of the topic  KEYS[2] jobs  KEYS[3] leased (ZSET member -> lease deadline ms)
-- KEYS[4] tokens (HASH member -> lease token)  KEYS[5] topics  KEYS[6] counts  KEYS[7] seq (STRING)
-- KEYS[8] audit  KEYS[9] gates (HASH: the topic's pause flag and limits, see _gate.lua; and
-- the consumers' suspect marks)
-- KEYS[10] history (HASH: the audit stream's per-job index, see _lib.lua)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] topic   ARGV[6] limit   ARGV[7] consumer name
-- Returns: a flat list: first the wait, 0 when no gate held jobs back, -1 when the topic is
-- paused (wait for its resume notice), else the ms until its limits let another job go; then per
-- leased job: member, token, deadline_ms, record (msgpack).
-- The lease lasts the job's lease_ms (record `l`, else the topic's `l`, else DEFAULT_LEASE_MS).
-- Suspects (record `u`: jobs whose lease was lost, see _lost.lua) run alone: a batch holds one
-- only as its first job and then nothing after it; the record keeps the consumer's name in `u`,
-- and the gates field "<consumer>|suspect" holds "<member> <token>" while that lease lasts.
-- Meanwhile the consumer is leased nothing in this shard: the reply's wait is SUSPECT_POLL_MS.
-- Jobs popped but not taken (a suspect behind others, anything behind a suspect) go back to the
-- front of the list in their order, and the topic is published so another consumer takes them.
-- Tokens are "<now_ms>-<seq>", unique even if the counter is lost with the data.
-- Events: leased {tok, dl, by}.
-- Publishes: on <prefix>ready, the topic when jobs are left behind (this consumer was full; another
-- may have room), never when the topic's gate held them back (every consumer would be refused).
-- The gate: a paused topic leases nothing; its rate and in-flight limits (same for every process
-- of the namespace) cut `limit` down, measured with the server's TIME (see _gate.lua).
-- Nothing ready on a topic without a gate: the answer is {0} whatever else holds, so give it
-- before the includes below, whose top level (every helper's closure, the slot probe) an empty
-- lease would pay for nothing: 61k of Redis's instructions here against 108k on the whole path
-- (callgrind, Redis 7.0.15). Under light load most leases find nothing: a worker's ack takes a
-- lease with it in one round trip, and listeners lease on every ready notice. A gated topic
-- takes the whole path, since a paused or limited one answers with its wait instead. Read-only,
-- and on declared keys only: in a cluster a migrating slot redirects it before it runs.
if redis.call('LLEN', KEYS[1]) == 0 then
  local topic = ARGV[5]
  local gated = redis.call('HMGET', KEYS[9], topic .. '|paused', topic .. '|rate',
                           topic .. '|flight')
  if not (gated[1] or gated[2] or gated[3]) then return {0} end
end
-- @include _lib.lua
-- @include _gate.lua
-- @constant DEFAULT_LEASE_MS
-- @constant TOKENS_PIN_BYTES
-- @constant SUSPECT_FIELD_SUFFIX
-- @constant SUSPECT_POLL_MS
local k = {ready = KEYS[1], jobs = KEYS[2], leased = KEYS[3], tokens = KEYS[4], topics = KEYS[5],
           counts = KEYS[6], seq = KEYS[7], audit = KEYS[8], gates = KEYS[9]}
use_history_index(KEYS[10])
buffer_history_index()
local topic, limit, consumer = ARGV[5], tonumber(ARGV[6]), ARGV[7]
local result = {0}
if limit < 1 then return result end
local gate = open_gate(k.gates, k.counts, topic, limit)
if gate.allowed < 1 then
  result[1] = gate_wait_ms(gate, 0)
  return result
end
local mark_field = consumer .. SUSPECT_FIELD_SUFFIX
local mark = rcall('HGET', k.gates, mark_field)
if mark then
  local held, held_token = string.match(mark, '^(.*) (%S+)$')
  if held and rcall('HGET', k.tokens, held) == held_token then
    result[1] = SUSPECT_POLL_MS
    return result
  end
  rcall('HDEL', k.gates, mark_field)  -- that lease ended (acked, failed, released, replaced)
end
local members = rcall('LPOP', k.ready, gate.allowed)
if not members then return result end
if #members == gate.allowed and gate.allowed < limit then
  -- Held back by the gate: the caller waits, and no other consumer is woken to be refused too.
  result[1] = gate_wait_ms(gate, #members)
elseif #members == limit and rcall('LLEN', k.ready) > 0 then
  ready_notice(topic)
end
local last_seq = rcall('INCRBY', k.seq, #members)
local topic_lease_ms = topic_config(k.topics, topic)['l'] or DEFAULT_LEASE_MS
-- The records are read with one HMGET and the tokens and deadlines written with one HSET and one
-- ZADD per slice of the batch, not one command per job: most of a script's time goes to each
-- redis.call's conversions and the interpreter, not to the commands' own work. The audit entry
-- (one per job, as every transition writes) is the one per-job call left.
local records = hmget_each_slice(k.jobs, members)
local token_args, deadline_args = {}, {}
local leased = 0
-- Texts made once per call, not per job: the token's "<now_ms>-" and the deadline of the last
-- lease length seen (a batch's jobs mostly share one; see integer_text in _lib.lua). One fields
-- table serves every job's event.
local token_prefix = now_ms_text .. '-'
local last_lease_ms, deadline, deadline_text = nil, nil, nil
local fields = {'tok', '', 'dl', '', 'by', consumer}
local first_seq = last_seq - #members
local r = #result
local kept_from = #members + 1  -- members from here on go back to the front of the list
for j, member in ipairs(members) do
  if j >= kept_from then break end
  local blob = records[j]
  local record = blob and cmsgpack.unpack(blob)
  local suspect = record and record[FIELD_SUSPECT]
  if suspect then
    if leased > 0 then
      kept_from, record = j, nil
    else
      kept_from = j + 1
    end
  end
  -- A member without a record can only come from a bug or a hand edit; failing here would drop
  -- the rest of the popped batch from every structure, so skip it (`redelay verify` shows the
  -- job as drift: the audit stream says ready, Redis has nothing).
  if record then
    local lease_ms = record[FIELD_LEASE] or topic_lease_ms
    if lease_ms ~= last_lease_ms then
      last_lease_ms = lease_ms
      deadline = now_ms + tonumber(lease_ms)
      deadline_text = integer_text(deadline)
    end
    local seq = first_seq + j
    -- Lua's `..` would write the number with %.14g: the same digits below 10^14, more slowly.
    local token = token_prefix .. (seq < 1e14 and string.format('%d', seq) or seq)
    token_args[2 * leased + 1], token_args[2 * leased + 2] = member, token
    deadline_args[2 * leased + 1], deadline_args[2 * leased + 2] = deadline_text, member
    leased = leased + 1
    if suspect then
      record[FIELD_SUSPECT] = consumer
      save_record(k.jobs, member, record)
      rcall('HSET', k.gates, mark_field, member .. ' ' .. token)
    end
    fields[2], fields[4] = token, deadline_text
    audit(k.audit, EVENT_LEASED, member, attempts_failed(record) + 1, fields, 6)
    result[r + 1], result[r + 2], result[r + 3], result[r + 4] =
      member, token, deadline, blob
    r = r + 4
  end
end
flush_history_index()
local taken = math.min(#members, kept_from - 1)  -- popped and not given back
for j = #members, kept_from, -1 do rcall('LPUSH', k.ready, members[j]) end
if taken < #members then ready_notice(topic) end
gate_passed(k.gates, topic, gate, taken)
-- The tokens hash is made with its pin, a value too long for a listpack, so it is a hashtable
-- from the start and never empties (see TOKENS_PIN_BYTES in actors/_constants.py).
if leased > 0 and rcall('EXISTS', k.tokens) == 0 then
  rcall('HSET', k.tokens, '', string.rep('-', TOKENS_PIN_BYTES))
end
-- Slices of 1000 values are 500 whole pairs each.
rcall_each_slice('HSET', k.tokens, token_args)
-- ZADD's arguments in descending member order: while the set is small (a listpack, up to 128
-- members by default), each insert scans it from the start to its place, comparing members among
-- equal deadlines, and a batch's deadlines are mostly equal; in this order each new member goes
-- before the others of its deadline, found at the first of them instead of after all.
if leased > 1 then
  local sorted, deadline_of = {}, {}
  for j = 1, leased do
    local member = deadline_args[2 * j]
    sorted[j] = member
    deadline_of[member] = deadline_args[2 * j - 1]
  end
  table.sort(sorted)
  for j = 1, leased do
    local member = sorted[leased + 1 - j]
    deadline_args[2 * j - 1], deadline_args[2 * j] = deadline_of[member], member
  end
end
rcall_each_slice('ZADD', k.leased, deadline_args)
rcall('HINCRBY', k.counts, topic .. '|ready', -taken)
rcall('HINCRBY', k.counts, topic .. '|leased', leased)
return result
