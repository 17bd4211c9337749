-- The delayed set: every job waiting for its due time, ordered by (due ms, member).
-- It is kept as small ZSETs of consecutive due times, the buckets <prefix>due:<n>, under an index
-- ZSET <prefix>due (bucket number n -> the bucket's earliest due time). Why: Redis stores a ZSET
-- of at most 128 entries of at most 64 bytes as one listpack; in buckets of at most
-- DUE_BUCKET_MAX (64) a job costs about 41 bytes with its share of the index, against about 120
-- in one big ZSET (its skiplist node and dict entry), a quarter of a pending job's memory
-- (docs/redis-layout.md#the-delayed-set).
-- Invariants every function here keeps:
--   * a bucket is never empty, and its index score is its earliest due time;
--   * buckets split the set by due time, never inside one due time: every entry of a bucket is
--     earlier than the next bucket's score. So index scores are distinct, and a due time belongs
--     to exactly one bucket: the last whose score is <= it (the first bucket takes anything
--     earlier than every score, and its score moves down).
-- Jobs written by redelay before this layout are in the legacy ZSET <prefix>delayed (member ->
-- due ms). Every function here reads it as well, and carry moves it into buckets a slice per call
-- (delayed_take_due), lowest first, so it drains without a migration step.
-- @include _lib.lua
-- @constant DUE_BUCKET_PREFIX
-- @constant DUE_BUCKET_MAX
-- @constant DUE_BUCKET_FILL
-- @constant LEGACY_DELAYED_KEY
-- @constant SEQ_KEY

local legacy_delayed_key = prefix .. LEGACY_DELAYED_KEY

local function bucket_key(name)
  return prefix .. DUE_BUCKET_PREFIX .. name
end

-- The bucket `due` belongs to and its score: the last bucket whose score is <= due, else the
-- first bucket (whose score then has to move down); nil, nil when there is no bucket.
local function bucket_for(index, due_text)
  local found = rcall('ZREVRANGEBYSCORE', index, due_text, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #found == 0 then found = rcall('ZRANGE', index, 0, 0, 'WITHSCORES') end
  if #found == 0 then return nil, nil end
  return found[1], tonumber(found[2])
end

-- After entries left bucket `name` (score `score` before): drop it from the index when empty,
-- else give it its new earliest due time.
local function settle_bucket(index, name, score)
  local first = rcall('ZRANGE', bucket_key(name), 0, 0, 'WITHSCORES')
  if #first == 0 then
    rcall('ZREM', index, name)
  elseif tonumber(first[2]) ~= score then
    rcall('ZADD', index, first[2], name)
  end
end

local function by_due(a, b)
  return a[1] < b[1]
end

-- Writes `entries` ({due, due text, member}, sorted by due) to buckets of about `size` entries
-- each, cut only between two due times; the first piece goes to bucket `first_name` when given
-- (emptied by the caller), the others to new buckets.
local function write_pieces(index, entries, size, first_name)
  local start = 1
  while start <= #entries do
    local stop = math.min(start + size - 1, #entries)
    while stop < #entries and entries[stop + 1][1] == entries[stop][1] do stop = stop + 1 end
    local name = first_name
    first_name = nil
    if not name then name = rcall('INCR', prefix .. SEQ_KEY) end
    local args, n = {}, 0
    for j = start, stop do
      args[n + 1], args[n + 2] = entries[j][2], entries[j][3]
      n = n + 2
    end
    rcall_each_slice('ZADD', bucket_key(name), args)
    rcall('ZADD', index, entries[start][2], name)
    start = stop + 1
  end
end

-- Adds `group` ({due, due text, member}, in due order) to bucket `name` scored `score`. A bucket
-- that would pass DUE_BUCKET_MAX entries (and so stop being a listpack) is not grown past it: a
-- group later than all of it (jobs added in due order) fills it up and starts new buckets with
-- the rest; otherwise the bucket and the group are rewritten as pieces of DUE_BUCKET_FILL.
local function add_to_bucket(index, name, score, group)
  local key = bucket_key(name)
  local size = rcall('ZCARD', key)
  local function grow()
    local args = {}
    for j, entry in ipairs(group) do args[2 * j - 1], args[2 * j] = entry[2], entry[3] end
    rcall_each_slice('ZADD', key, args)
    -- The group is in due order: its first job is its earliest.
    if group[1][1] < score then rcall('ZADD', index, group[1][2], name) end
  end
  if size + #group <= DUE_BUCKET_MAX then return grow() end
  local last = rcall('ZRANGE', key, -1, -1, 'WITHSCORES')
  if group[1][1] > tonumber(last[2]) then
    -- Later than all of the bucket: fill it up, and the rest starts new buckets after it.
    local room = math.max(DUE_BUCKET_MAX - size, 0)
    while room > 0 and room < #group and group[room + 1][1] == group[room][1] do room = room - 1 end
    if room > 0 then
      local args = {}
      for j = 1, room do args[2 * j - 1], args[2 * j] = group[j][2], group[j][3] end
      rcall_each_slice('ZADD', key, args)
    end
    local rest = {}
    for j = room + 1, #group do rest[#rest + 1] = group[j] end
    write_pieces(index, rest, DUE_BUCKET_MAX, nil)
    return
  end
  -- Past DUE_BUCKET_MAX already: a run of jobs due at one moment (a burst), which no cut may
  -- split. Rewriting it would cost more than its entries could save.
  if size > DUE_BUCKET_MAX then return grow() end
  local stored = rcall('ZRANGE', key, 0, -1, 'WITHSCORES')
  local merged, g = {}, 1
  for j = 1, #stored, 2 do
    local due = tonumber(stored[j + 1])
    while g <= #group and group[g][1] < due do
      merged[#merged + 1] = group[g]
      g = g + 1
    end
    merged[#merged + 1] = {due, stored[j + 1], stored[j]}
  end
  for j = g, #group do merged[#merged + 1] = group[j] end
  rcall('DEL', key)
  write_pieces(index, merged, DUE_BUCKET_FILL, name)
end

-- Adds `entries` ({due ms, due as text, member}, any order; none of them delayed already) to the
-- delayed set, with one ZADD per bucket they fall in. They are taken in due order (sorted here
-- when they come in another), so that jobs sharing buckets find them with one read of the index.
local function delayed_insert(index, entries)
  if #entries == 0 then return end
  for j = 2, #entries do
    if entries[j][1] < entries[j - 1][1] then
      local sorted = {}
      for i, entry in ipairs(entries) do sorted[i] = entry end
      table.sort(sorted, by_due)
      entries = sorted
      break
    end
  end
  local groups, order, scores = {}, {}, {}
  local function put(name, score, entry)
    local group = groups[name]
    if not group then
      group = {}
      groups[name], scores[name] = group, score
      order[#order + 1] = name
    end
    group[#group + 1] = entry
  end
  local name, score = bucket_for(index, entries[1][2])
  if name == nil then
    -- No bucket at all: this call's entries make the first ones.
    write_pieces(index, entries, DUE_BUCKET_MAX, nil)
    return
  end
  local after = '(' .. integer_text(score)
  local last = entries[#entries][2]
  if #entries == 1 or rcall('ZCOUNT', index, after, last) > #entries then
    -- Few jobs per bucket (one job, or jobs spread over a large set): one lookup each.
    put(name, score, entries[1])
    for j = 2, #entries do
      name, score = bucket_for(index, entries[j][2])
      put(name, score, entries[j])
    end
  else
    -- Many jobs per bucket: the buckets the jobs fall in, read at once and walked in step.
    local later = rcall('ZRANGEBYSCORE', index, after, last, 'WITHSCORES')
    local next_at = 1
    for _, entry in ipairs(entries) do
      while later[next_at] and entry[1] >= tonumber(later[next_at + 1]) do
        name, score = later[next_at], tonumber(later[next_at + 1])
        next_at = next_at + 2
      end
      put(name, score, entry)
    end
  end
  for _, bucket in ipairs(order) do add_to_bucket(index, bucket, scores[bucket], groups[bucket]) end
end

-- The earliest due time in the buckets, or nil when there are none: what add and place compare a
-- new job's due time with, to tell the carriers of an earlier one. Jobs still in the legacy
-- ZSET are left out, which at worst sends a wake no carrier needed.
local function delayed_first_bucket_due(index)
  local first = rcall('ZRANGE', index, 0, 0, 'WITHSCORES')
  return first[2] and tonumber(first[2])
end

-- The earliest due time in the delayed set (a number), or nil when it is empty.
local function delayed_earliest(index)
  local first = rcall('ZRANGE', index, 0, 0, 'WITHSCORES')
  local legacy = rcall('ZRANGE', legacy_delayed_key, 0, 0, 'WITHSCORES')
  local earliest = first[2] and tonumber(first[2])
  if legacy[2] and (earliest == nil or tonumber(legacy[2]) < earliest) then
    earliest = tonumber(legacy[2])
  end
  return earliest
end

-- Whether `member`, whose record says it is due at `due_ms`, is in the delayed set.
local function delayed_has(index, member, due_ms)
  local name = due_ms and bucket_for(index, integer_text(due_ms))
  if name and rcall('ZSCORE', bucket_key(name), member) then return true end
  return rcall('ZSCORE', legacy_delayed_key, member) ~= false
end

-- Removes `member`, whose record says it is due at `due_ms`; returns whether it was delayed.
local function delayed_remove(index, member, due_ms)
  local name, score = nil, nil
  if due_ms then name, score = bucket_for(index, integer_text(due_ms)) end
  if name and rcall('ZREM', bucket_key(name), member) == 1 then
    settle_bucket(index, name, score)
    return true
  end
  return rcall('ZREM', legacy_delayed_key, member) == 1
end

-- Moves the `limit` earliest entries of the legacy ZSET into buckets. Taken before every carry,
-- so what carry takes next is never later than a legacy entry still waiting: the `limit` entries
-- it takes are at most the `limit` just moved.
local function drain_legacy(index, limit)
  local legacy = rcall('ZRANGE', legacy_delayed_key, 0, limit - 1, 'WITHSCORES')
  if #legacy == 0 then return end
  local entries = {}
  for j = 1, #legacy, 2 do entries[#entries + 1] = {tonumber(legacy[j + 1]), legacy[j + 1], legacy[j]} end
  delayed_insert(index, entries)
  rcall('ZREMRANGEBYRANK', legacy_delayed_key, 0, #entries - 1)
end

-- Takes out the entries due at now_ms or earlier, at most `limit`, earliest first (equal due
-- times in member order). Returns {member, due text, member, due text, ...}.
local function delayed_take_due(index, limit)
  drain_legacy(index, limit)
  local taken = {}
  local buckets = rcall('ZRANGEBYSCORE', index, '-inf', now_ms_text, 'WITHSCORES', 'LIMIT', 0, limit)
  for j = 1, #buckets, 2 do
    local left = limit - #taken / 2
    if left <= 0 then break end
    local key = bucket_key(buckets[j])
    local due = rcall('ZRANGEBYSCORE', key, '-inf', now_ms_text, 'WITHSCORES', 'LIMIT', 0, left)
    if #due > 0 then  -- (never 0 while the index is right; 0 would make the rank range "all")
      for i = 1, #due do taken[#taken + 1] = due[i] end
      rcall('ZREMRANGEBYRANK', key, 0, #due / 2 - 1)
    end
    settle_bucket(index, buckets[j], tonumber(buckets[j + 1]))
  end
  return taken
end

-- Every bucket with its index score and entries, then the legacy ZSET's entries: {{name, score,
-- {member, due, ...}}, ..., {member, due, ...}}. O(jobs): for snapshots, which check the
-- invariants above (actors/storage/reads.py).
local function delayed_layout(index)
  local layout = {}
  local buckets = rcall('ZRANGE', index, 0, -1, 'WITHSCORES')
  for j = 1, #buckets, 2 do
    layout[#layout + 1] = {buckets[j], buckets[j + 1],
                           rcall('ZRANGE', bucket_key(buckets[j]), 0, -1, 'WITHSCORES')}
  end
  layout[#layout + 1] = rcall('ZRANGE', legacy_delayed_key, 0, -1, 'WITHSCORES')
  return layout
end
