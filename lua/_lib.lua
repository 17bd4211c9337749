-- Shared helpers, pasted into a script by the loader at its include line for this file.
-- Conventions every transition script follows:
--   ARGV[1] now_ms: "" for the server's clock (TIME), which every production caller sends, so
--           no process's clock can make a job due or a lease expired early; or the time of a
--           clock the caller owns and the scripts must follow (a fake clock in tests and the
--           deterministic simulator, see actors/clock.py)
--   ARGV[2] audit trim kind: "MAXLEN", "MINID" or "NONE"
--   ARGV[3] audit trim threshold (approximate, `~`): entries to keep for MAXLEN; for MINID, how
--           many ms of history to keep before the newest entry's id (the server's clock, so a
--           skewed caller can never trim the entry it just wrote)
--   ARGV[4] key prefix of the shard, e.g. "redelay:{shop.0}:" (for per-topic ready lists)
--   The last KEYS of a script that writes audit entries: <prefix>history, the per-job index
--           each entry also goes to (use_history_index). Declared, not built from the prefix: while a slot migrates, a
--           script sent to the importing node with ASKING runs there only once every declared
--           key has arrived, and a key built in the script would be created there anew (the
--           migration's MIGRATE of the old one then fails with BUSYKEY).
-- A job is a member string "<topic>|<id>"; topics never contain "|", so the first "|" splits it.
-- States, events, error codes and job record fields are written STATE_LEASED, EVENT_ACKED,
-- CODE_STALE_TOKEN, FIELD_DUE...: the loader puts in the values of the Python tables
-- (actors/lifecycle.py, actors/errors.py, actors/storage/codec.py), see actors/storage/scripts.py.
-- Key names the scripts build from the prefix, defined once in actors/_constants.py:
-- @constant READY_KEY_PREFIX
-- @constant READY_CHANNEL
-- @constant SLOT_PROBE_KEY
local rcall = redis.call
local now_ms, now_ms_text
if ARGV[1] == '' then
  -- Redis 6.2 replicates a script that read TIME and writes only by its effects, which this
  -- asks for (its default since 5.0 already); Redis 7 always does, and keeps the call as a no-op.
  if redis.replicate_commands then redis.replicate_commands() end
  local time = rcall('TIME')
  now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  now_ms_text = string.format('%d', now_ms)
else
  now_ms = tonumber(ARGV[1])
  -- now_ms as the text Redis would make of the number (redis.call formats a Lua number with
  -- %.17g, and Lua's own `..` with %.14g: both slow, and the same digits for an integer below
  -- 10^14): the caller's digits themselves, when they are an integer's canonical form.
  now_ms_text = now_ms
  if string.find(ARGV[1], '^%-?[1-9]%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?$')
      or ARGV[1] == '0' then
    now_ms_text = ARGV[1]
  end
end
local trim_kind = ARGV[2]
local trim_arg = ARGV[3]
local prefix = ARGV[4]

-- Redis Cluster, while this shard's slot migrates to another node: a key this node lacks may
-- already be there, and a command on it fails the script half-way, after earlier writes (scripts
-- do not roll back), leaving a job in no structure. A key that never exists is redirected exactly
-- then, so refuse before writing anything; cluster clients retry TRYAGAIN until the move is done.
local slot_probe = redis.pcall('EXISTS', prefix .. SLOT_PROBE_KEY)
if type(slot_probe) == 'table' and slot_probe.err then
  return redis.error_reply('TRYAGAIN redelay: this shard\'s slot is migrating')
end

local function split_member(member)
  local bar = string.find(member, '|', 1, true)
  return string.sub(member, 1, bar - 1), string.sub(member, bar + 1)
end

local function ready_key(topic)
  return prefix .. READY_KEY_PREFIX .. topic
end

-- Tells the listeners of every process, on <prefix>ready, that a topic has ready jobs they may
-- not know of: its list was empty, or a lease left jobs behind (that consumer was full). No
-- listener blocks on a ready list: every process's notifier turns this into a ReadyNotice.
local function ready_notice(topic)
  rcall('PUBLISH', prefix .. READY_CHANNEL, topic)
end

local audit_trimmed = false

-- The per-job index of the audit stream (<prefix>history): member -> the ids of its entries,
-- oldest first, space separated, so one job's history is read in time proportional to its own
-- events. Written here, in the script that writes the entry. The index follows the stream's
-- retention in two generations: <prefix>history takes every new id, <prefix>history-previous
-- holds the ids written before the current generation began (its field "", which no member can
-- be, holds that entry time in ms, as "0 <ms>"). Once the stream's oldest entry is newer than
-- that time, every id of the previous generation is trimmed: the scripts that end jobs then
-- drop it whole (UNLINK, freed off Redis's main thread) and the current one becomes the
-- previous. So forgetting trimmed histories costs one XRANGE and one HGET an ending call, not a
-- scan of the index's fields.
local history_key, history_previous_key = nil, nil
-- @constant HISTORY_GENERATION_FIELD

-- Each script that writes audit entries names its index key (its last KEYS, or the last but one
-- with the previous generation last, in the scripts that end jobs) before writing one.
local function use_history_index(key, previous_key)
  history_key, history_previous_key = key, previous_key
end
local END_EVENTS = {acked = true, cancelled = true, purged = true}
local ends_in_call = 0
local last_stream, last_entry_id = nil, nil

local function entry_ms(entry_id)
  return tonumber(string.match(entry_id, '^(%d+)'))
end

-- A script that writes many entries asks for them to be buffered (buffer_history_index) and
-- written with one HMGET and one HSET per call (flush_history_index), not an HGET and an HSET per
-- entry: most of a script's time goes to each redis.call's conversions. Such a script flushes
-- before rotate_history_index and before it returns; until then nothing reads the index.
-- Pending entries are member, entry id pairs, in the order written.
local index_pending, index_pending_n = nil, 0

local function buffer_history_index()
  index_pending, index_pending_n = {}, 0
end

-- Appends one entry id to the member's field of the index (buffered when asked).
local function index_id(member, entry_id)
  if index_pending then
    index_pending[index_pending_n + 1], index_pending[index_pending_n + 2] = member, entry_id
    index_pending_n = index_pending_n + 2
    return
  end
  local ids = rcall('HGET', history_key, member)
  rcall('HSET', history_key, member, ids and (ids .. ' ' .. entry_id) or entry_id)
end

local function index_entry(member, id, event, entry_id)
  if id == '' then return end  -- a topic's own event (pause, resume) names no job
  if END_EVENTS[event] then ends_in_call = ends_in_call + 1 end
  index_id(member, entry_id)
end

-- Writes the buffered entries: each member's new ids, oldest first, after the ids it had.
local function flush_history_index()
  if not index_pending or index_pending_n == 0 then return end
  if index_pending_n == 2 then  -- one entry: no tables to build (a lease or ack of one job)
    index_pending_n = 0
    local member, entry_id = index_pending[1], index_pending[2]
    local ids = rcall('HGET', history_key, member)
    rcall('HSET', history_key, member, ids and (ids .. ' ' .. entry_id) or entry_id)
    return
  end
  local order, added = {}, {}
  for j = 1, index_pending_n, 2 do
    local member, entry_id = index_pending[j], index_pending[j + 1]
    local ids = added[member]
    if ids then
      added[member] = ids .. ' ' .. entry_id  -- a second entry of one job in this call
    else
      order[#order + 1] = member
      added[member] = entry_id
    end
  end
  index_pending_n = 0
  local args = index_pending  -- read above; reused for the HSET's arguments
  for first = 1, #order, 1000 do
    local last = math.min(first + 999, #order)
    local old = rcall('HMGET', history_key, unpack(order, first, last))
    local m = 0
    for j = first, last do
      local member = order[j]
      local ids = old[j - first + 1]
      args[m + 1] = member
      args[m + 2] = ids and (ids .. ' ' .. added[member]) or added[member]
      m = m + 2
    end
    rcall('HSET', history_key, unpack(args, 1, m))
  end
end

-- Called by the scripts that end jobs, after their last entry: when the stream's oldest entry is
-- newer than the current generation's start, every id of the previous generation is trimmed, so
-- it goes and the current one becomes the previous. The start is kept as "0 <ms>", the form the
-- field-by-field sweep of redelay before 779cbdd kept in "" ("<cursor> <ms>", 0: between passes):
-- so an older worker still running beside this one sweeps the current generation as its own
-- index, and only ever raises the start (a later start drops the previous generation later,
-- never early). An index without a start is new or was emptied: with no previous generation it
-- becomes the previous one; with one, it only gets a start, as its ids may still be in the stream.
local function rotate_history_index()
  if ends_in_call == 0 or last_stream == nil then return end
  ends_in_call = 0
  local oldest = rcall('XRANGE', last_stream, '-', '+', 'COUNT', '1')
  if #oldest == 0 then return end
  local state = rcall('HGET', history_key, HISTORY_GENERATION_FIELD)
  local began_ms = state and tonumber(string.match(state, '(%d+)$'))
  if began_ms and entry_ms(oldest[1][1]) <= began_ms then return end
  -- Ids of the newest entry's millisecond may be in both generations; the previous one goes
  -- only once the oldest entry is past that millisecond.
  local start = '0 ' .. string.match(last_entry_id, '^(%d+)')
  if began_ms then
    rcall('UNLINK', history_previous_key)
  elseif rcall('EXISTS', history_previous_key) == 1 then
    rcall('HSET', history_key, HISTORY_GENERATION_FIELD, start)
    return
  end
  if rcall('EXISTS', history_key) == 1 then rcall('RENAME', history_key, history_previous_key) end
  rcall('HSET', history_key, HISTORY_GENERATION_FIELD, start)
end

-- One table for every XADD of the call, filled up to `n` and passed with unpack(t, 1, n), instead
-- of a fresh table per event grown with #t (allocation, rehashing and length searches per event).
local xadd_args = {}

-- Integers as text, the digits redis.call would make of them (%.17g; no exponent below 10^15),
-- so each is formatted once (attempt numbers, a lease's deadline), not at every redis.call, and
-- with string.format's integer path, not Lua's or Redis's floating point one. Anything else is
-- left a number for redis.call to format as before.
local function integer_text(x)
  -- 0 stays a number: %d cannot tell -0 from 0, %.17g does.
  if x ~= 0 and x == math.floor(x) and x > -1e15 and x < 1e15 then
    return string.format('%d', x)
  end
  return x
end
local attempt_texts = {}
local function attempt_text(attempt)
  local text = attempt_texts[attempt]
  if not text then
    text = integer_text(attempt)
    attempt_texts[attempt] = text
  end
  return text
end

-- Appends one audit event, and its id to the job's index unless `unindexed` (the add script
-- keeps an `added` id in the record instead: record_with_entry); returns the entry's id.
-- `fields` is a flat list of name, value pairs after e/t/i/a/ms, its first `count` values
-- (default: #fields) are written, so a caller may reuse one table for every event.
local function audit(stream, event, member, attempt, fields, count, unindexed)
  local topic, id = split_member(member)
  local a, n = xadd_args, 1
  a[1] = stream
  a[n + 1], a[n + 2], a[n + 3], a[n + 4], a[n + 5] = '*', 'e', event, 't', topic
  a[n + 6], a[n + 7], a[n + 8], a[n + 9] = 'i', id, 'a', attempt_text(attempt)
  a[n + 10], a[n + 11] = 'ms', now_ms_text
  n = n + 11
  if fields then
    count = count or #fields
    for j = 1, count do a[n + j] = fields[j] end
    n = n + count
  end
  local entry_id = rcall('XADD', unpack(a, 1, n))
  last_stream, last_entry_id = stream, entry_id
  if not unindexed then index_entry(member, id, event, entry_id) end
  -- Retention trims once per script call, after its first entry, not with every XADD: MAXLEN on
  -- each would cost three more arguments and a trim check per entry (4.5% of Redis's
  -- instructions per job: simulations/bench/probes/script_instructions.py). The call's later entries wait
  -- for the next call's trim, which `~` (whole nodes only) never made exact anyway. MINID is
  -- measured back from the id just written; ids are the server's milliseconds, and now_ms may be
  -- a fake clock's.
  if not audit_trimmed then
    audit_trimmed = true
    if trim_kind == 'MAXLEN' then
      rcall('XTRIM', stream, 'MAXLEN', '~', trim_arg)
    elseif trim_kind == 'MINID' then
      local oldest_ms = math.max(0, entry_ms(entry_id) - tonumber(trim_arg))
      rcall('XTRIM', stream, 'MINID', '~', string.format('%d-0', oldest_ms))
    end
  end
  return entry_id
end

-- Runs `command key value...` over a long list in slices: Lua's unpack() refuses more than about
-- 8000 values, and carry or lease may move up to 10000 jobs in one call. Returns the last reply
-- (an RPUSH's: the list's length after all of them).
local function rcall_each_slice(command, key, values)
  local reply
  for first = 1, #values, 1000 do
    reply = rcall(command, key, unpack(values, first, math.min(first + 999, #values)))
  end
  return reply
end

-- Per topic and state counters, so stats() is O(topics) and not a scan.
local function count(counts_key, member, state, delta)
  local topic = split_member(member)
  rcall('HINCRBY', counts_key, topic .. '|' .. state, delta)
end

-- `HMGET key member...` over a long list in slices (see rcall_each_slice): the values in the
-- members' order, false for a missing field. One command per slice rather than an HGET per job:
-- each redis.call's conversions cost more than reading the field.
local function hmget_each_slice(key, members)
  local values = {}
  for first = 1, #members, 1000 do
    local slice = rcall('HMGET', key, unpack(members, first, math.min(first + 999, #members)))
    for j = 1, #slice do values[first + j - 1] = slice[j] end
  end
  return values
end

local function load_record(jobs_key, member)
  local blob = rcall('HGET', jobs_key, member)
  if not blob then return nil end
  return cmsgpack.unpack(blob)
end

local function save_record(jobs_key, member, record)
  rcall('HSET', jobs_key, member, cmsgpack.pack(record))
end

-- A job the add script created keeps the id of its `added` entry in its record (field `h`), not
-- in the history index: while it is pending it has no index field, about 100 bytes of Redis
-- memory saved per pending job (docs/benchmarks.md). When the record goes (an end, a replace),
-- keep_added_entry moves the id to the index, so an ended job's history is found as before;
-- history-4.lua reads the record's id and the index's. Lua's cmsgpack and the Python codec keep
-- and ignore the field as they do any other; save_record writes it back with the rest.
local RECORD_ENTRY_KEY = '\161h'  -- msgpack's fixstr "h"

-- The record blob with an `h` pair for `entry_id` appended, without unpacking it: the blob's
-- first byte counts its pairs (a msgpack fixmap). nil when it is not a fixmap with room for one
-- more pair or the id is too long for a fixstr; the add script indexes such a job's id instead.
local function record_with_entry(blob, entry_id)
  local header = string.byte(blob, 1)
  if not header or header < 0x80 or header >= 0x8f or #entry_id > 31 then return nil end
  return string.char(header + 1) .. string.sub(blob, 2) .. RECORD_ENTRY_KEY
    .. string.char(0xa0 + #entry_id) .. entry_id
end

-- Whether a stored record is the one an add sent: the same bytes, or those bytes with the pair
-- record_with_entry appended (then the call is a resend of an add whose reply was lost).
local function same_record(stored, sent)
  if stored == sent then return true end
  local n = #sent
  return #stored > n + 2 and string.byte(stored, 1) == string.byte(sent, 1) + 1
    and string.sub(stored, 2, n) == string.sub(sent, 2)
    and string.sub(stored, n + 1, n + 2) == RECORD_ENTRY_KEY
end

-- Before a job's record is deleted or replaced: the id its record kept goes to the index.
local function keep_added_entry(member, record)
  local entry_id = record and record[FIELD_HISTORY]
  if entry_id then index_id(member, entry_id) end
end

-- The topic's stored defaults (retry schedule `r`, lease `l`), written when the topic is first used
-- and overwritten by a worker that registers a handler for it.
local function topic_config(topics_key, topic)
  local blob = rcall('HGET', topics_key, topic)
  if not blob then return {} end
  return cmsgpack.unpack(blob)
end

local function attempts_failed(record)
  return tonumber(record[FIELD_ATTEMPTS] or 0)
end
