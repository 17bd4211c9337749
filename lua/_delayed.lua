-- The delayed set: every job waiting for its due time, ordered by (due ms, member), members of
-- one due time in byte order (as a ZSET orders equal scores).
-- It is kept as small ZSETs, the buckets, each a run of consecutive jobs in that order, under an
-- index ZSET <prefix>due. A bucket is named after its first member: the key is
-- <prefix>due:<first member>, and its index entry is that member scored with its due time. Why:
-- Redis stores a ZSET of at most 128 entries of at most 64 bytes as one listpack; in buckets of
-- at most DUE_BUCKET_MAX (64) a job costs about 42 bytes with its share of the index, against
-- about 120 in one big ZSET (its skiplist node and dict entry), a quarter of a pending job's
-- memory (docs/redis-layout.md#the-delayed-set). The index orders the buckets exactly as their
-- jobs are ordered, so a bucket may be cut anywhere, inside a run of jobs due at one moment too
-- (an add_many with one delay): every bucket stays small.
-- Invariants every function here keeps:
--   * a bucket is never empty and holds at most DUE_BUCKET_MAX jobs; its index entry is scored
--     with its first job's due time, and named after that job, except in the first bucket;
--   * the first bucket may keep the name of a job carry took from it (settle_first_bucket): a
--     member no longer in the set, which sorts before the next bucket's index entry;
--   * every job of a bucket comes before the next bucket's first job. So a job belongs to
--     exactly one bucket: the last whose (score, name) is not after the job's (due, member) (the
--     first bucket takes anything before all of them, and is renamed).
-- Why the first bucket's exception: carry takes jobs from the front of the set a few at a time
-- under steady load, and renaming copies the rest of the bucket (rekey_bucket) on every call.
-- @include _lib.lua
-- @constant DUE_BUCKET_PREFIX
-- @constant DUE_BUCKET_MAX
-- @constant DUE_BUCKET_FILL

-- An add walks the index entries its due times span while there are at most this many per job;
-- past that, it looks up each due time's bucket (put_by_lookup): 3 cost an add no more than 1,
-- and 8 cost it more (docs/benchmarks.md#design-measurements-historic).
local WALK_BUCKETS_PER_JOB = 3

local function bucket_key(name)
  return prefix .. DUE_BUCKET_PREFIX .. name
end

local byte = string.byte

-- Whether Lua's < on strings orders members as their bytes do. It is strcoll() under the
-- server's LC_COLLATE (its environment's, or Redis 7.2's locale-collate setting): the C and POSIX
-- locales, Redis's default when nothing sets one, and C.UTF-8 compare bytes; a language's locale
-- folds case and skips punctuation, which this probe catches. Members are printable ASCII
-- (topics and ids are validated so), hence the probe: every printable character in byte order,
-- and the multi-character cases where language collations differ. < is about ten times faster
-- than the byte loop, but the probe's hundred strcoll() calls cost Redis about as much as the
-- rest of an add of one job (simulations/bench/probes/script_instructions.py): a call probes only once it has
-- compared more members than BYTE_LOOP_COMPARISONS, which a call handling one job never does.
local collation_is_bytes = nil
local BYTE_LOOP_COMPARISONS = 32
local comparisons = 0
local function probe_collation()
  local previous = ' '
  for code = 33, 126 do
    local char = string.char(code)
    if not (previous < char) then return false end
    previous = char
  end
  return ('a-c' < 'ab') and ('aB' < 'ab') and ('ab' < 'ab-') and ('aa|' < 'a|z') and ('Z' < 'a')
end

-- Byte order, as a ZSET orders equal scores.
local function bytes_greater(a, b)
  if a == b then return false end
  if collation_is_bytes == nil then
    comparisons = comparisons + 1
    if comparisons > BYTE_LOOP_COMPARISONS then collation_is_bytes = probe_collation() end
  end
  if collation_is_bytes then return a > b end
  for j = 1, math.min(#a, #b) do
    local x, y = byte(a, j), byte(b, j)
    if x ~= y then return x > y end
  end
  return #a > #b
end

-- The first rank in [low, high) of ZSET `key` whose member comes after `member` in byte order,
-- else high; the entries of those ranks share one score, so the ZSET keeps them in byte order and
-- a binary search finds it.
local function first_rank_after(key, low, high, member)
  while low < high do
    local middle = math.floor((low + high) / 2)
    if bytes_greater(rcall('ZRANGE', key, middle, middle)[1], member) then
      high = middle
    else
      low = middle + 1
    end
  end
  return low
end

-- Whether the job (due_a, member_a) comes after (due_b, member_b) in the set's order.
local function comes_after(due_a, member_a, due_b, member_b)
  if due_a ~= due_b then return due_a > due_b end
  return bytes_greater(member_a, member_b)
end

-- The last bucket that starts at the due time `due_text` or before it, else the first bucket,
-- with its score, and whether that is the bucket of the job (due, member): it is, unless it
-- starts at this very due time after `member` (a cut run of jobs due at one moment), and then
-- the job's bucket is an earlier one of that due time. nil, nil when there is no bucket.
local function bucket_at_or_before(index, due_text, member)
  local found = rcall('ZREVRANGEBYSCORE', index, due_text, '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
  if #found == 0 then found = rcall('ZRANGE', index, '0', '0', 'WITHSCORES') end
  if #found == 0 then return nil, nil, true end
  local name, score = found[1], tonumber(found[2])
  return name, score, score ~= tonumber(due_text) or not bytes_greater(name, member)
end

-- The bucket the job (due, member) belongs to, and its score: the last bucket whose (score,
-- name) is not after the job's, else the first bucket; nil, nil when there is no bucket. One
-- read, unless buckets start at this very due time after `member`: then a binary search among
-- the buckets that start at it, one ZRANGE per step. It only reads, so the listing and inspect
-- can call it; an add finds the jobs of a cut run by rank instead (put_by_lookup).
local function bucket_for(index, due_text, member)
  local name, score, settled = bucket_at_or_before(index, due_text, member)
  if settled then return name, score end
  -- The first bucket of this due time named after `member`: `name` or one before it.
  local after = first_rank_after(index, rcall('ZCOUNT', index, '-inf', '(' .. due_text),
                                 rcall('ZRANK', index, name), member)
  local found = rcall('ZRANGE', index, math.max(after - 1, 0), math.max(after - 1, 0),
                      'WITHSCORES')
  return found[1], tonumber(found[2])
end

-- The last bucket that starts before the due time `due_text`, else the first bucket; nil, nil
-- when there is no bucket. Every job due then or later belongs to it or to a bucket after it.
local function bucket_before(index, due_text)
  local found = rcall('ZREVRANGEBYSCORE', index, '(' .. due_text, '-inf', 'WITHSCORES',
                      'LIMIT', '0', '1')
  if #found == 0 then found = rcall('ZRANGE', index, '0', '0', 'WITHSCORES') end
  if #found == 0 then return nil, nil end
  return found[1], tonumber(found[2])
end

-- After the first jobs of bucket `name` changed (taken out, or an earlier one added): drops it
-- from the index when empty, else names it after its first member again. The entries are copied
-- (at most DUE_BUCKET_MAX, bar a burst bucket of the first layout), not RENAMEd: on Redis
-- Cluster a node importing the shard's slot answers a command on two keys, one of them missing,
-- with TRYAGAIN, which would fail the script half-way; commands on one key are served.
local function rekey_bucket(index, name)
  local key = bucket_key(name)
  local entries = rcall('ZRANGE', key, '0', '-1', 'WITHSCORES')
  if #entries == 0 then
    rcall('ZREM', index, name)
  elseif entries[1] ~= name then
    local args = {}
    for j = 1, #entries, 2 do args[j], args[j + 1] = entries[j + 1], entries[j] end
    rcall('DEL', key)
    rcall_each_slice('ZADD', bucket_key(entries[1]), args)
    rcall('ZREM', index, name)
    rcall('ZADD', index, entries[2], entries[1])
  end
end

-- After the first jobs of bucket `name`, the set's first bucket, were taken out (carry, cancel):
-- drops it from the index when empty; else its index entry gets its new first job's due time and
-- keeps its name while that entry still sorts before the next bucket's (one ZADD, where
-- rekey_bucket copies up to DUE_BUCKET_MAX entries), and is renamed otherwise, so the index keeps
-- the buckets in order. `score`: the entry's score, when the caller knows it.
local function settle_first_bucket(index, name, score)
  local first = rcall('ZRANGE', bucket_key(name), '0', '0', 'WITHSCORES')
  if #first == 0 then
    rcall('ZREM', index, name)
    return
  end
  if first[1] == name or tonumber(first[2]) == score then return end
  local due = tonumber(first[2])
  local next_bucket = rcall('ZRANGE', index, '1', '1', 'WITHSCORES')
  local next_due = next_bucket[2] and tonumber(next_bucket[2])
  -- Ties: a run due at one moment, cut into buckets; the next one's name must come after.
  if next_due == nil or next_due > due
      or (next_due == due and bytes_greater(next_bucket[1], name)) then
    rcall('ZADD', index, 'XX', first[2], name)
  else
    rekey_bucket(index, name)
  end
end

-- Where a first bucket still named after a job carry took is renamed: before that job comes
-- back to the set (a bucket key names one bucket, and the job may start a bucket of its own).
-- `first_name` is the first bucket's name; `entries` are jobs about to be added, none of them in
-- the set, so one of them named like a bucket means that bucket's name is stale.
local function rename_stale_first(index, first_name, entries)
  if first_name == nil then return end
  for _, entry in ipairs(entries) do
    if entry[3] == first_name then
      rekey_bucket(index, first_name)
      return
    end
  end
end

local function by_due(a, b)
  return a[1] < b[1]
end

-- {due, due text, member} entries as ZADD's arguments.
local function zadd_args(entries, first, last)
  local args, n = {}, 0
  for j = first or 1, last or #entries do
    args[n + 1], args[n + 2] = entries[j][2], entries[j][3]
    n = n + 2
  end
  return args
end

-- `entries` (sorted by due) in the set's order. Jobs due at one moment have to be in member byte
-- order. They often come so (ids made in order), which one pass checks; otherwise a ZSET gives
-- that order for free: they are added to a scratch ZSET and read back. The scratch key is the
-- bucket key of the first entry's member, which no bucket can have: a bucket is named after a
-- member of the set, and these jobs are not in it yet.
local function in_set_order(entries)
  local in_order = true
  for j = 2, #entries do
    local a, b = entries[j - 1], entries[j]
    if a[1] == b[1] and bytes_greater(a[3], b[3]) then
      in_order = false
      break
    end
  end
  if in_order then return entries end
  local scratch = bucket_key(entries[1][3])
  rcall_each_slice('ZADD', scratch, zadd_args(entries))
  local read = rcall('ZRANGE', scratch, '0', '-1', 'WITHSCORES')
  rcall('DEL', scratch)
  local ordered = {}
  for j = 1, #read, 2 do ordered[#ordered + 1] = {tonumber(read[j + 1]), read[j + 1], read[j]} end
  return ordered
end

-- Writes `entries` (in the set's order) as new buckets of `size` jobs each. A piece named
-- `indexed` (a bucket being rewritten, whose first job stays first) keeps its index entry.
local function write_pieces(index, entries, size, indexed)
  for start = 1, #entries, size do
    local stop = math.min(start + size - 1, #entries)
    local name = entries[start][3]
    rcall('ZADD', bucket_key(name), unpack(zadd_args(entries, start, stop)))
    if name ~= indexed then rcall('ZADD', index, entries[start][2], name) end
  end
end

-- Adds `group` ({due, due text, member}, in the set's order) to bucket `name` scored `score`,
-- which they all belong to. A bucket that would pass DUE_BUCKET_MAX entries (and so, past 128,
-- stop being a listpack) is not grown past it: a group later than all of it (jobs added in
-- order) fills it up and starts new buckets with the rest; otherwise the bucket and the group are
-- rewritten as pieces of DUE_BUCKET_FILL.
local function add_to_bucket(index, name, score, group)
  local key = bucket_key(name)
  local size = rcall('ZCARD', key)
  if size + #group <= DUE_BUCKET_MAX then
    rcall('ZADD', key, unpack(zadd_args(group)))
    -- Only the first bucket takes jobs before its first, and is then renamed.
    if comes_after(score, name, group[1][1], group[1][3]) then rekey_bucket(index, name) end
    return
  end
  local last = rcall('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if comes_after(group[1][1], group[1][3], tonumber(last[2]), last[1]) then
    -- After all of the bucket: fill it up, and the rest starts new buckets after it.
    local room = math.min(math.max(DUE_BUCKET_MAX - size, 0), #group)
    if room > 0 then rcall('ZADD', key, unpack(zadd_args(group, 1, room))) end
    local rest = {}
    for j = room + 1, #group do rest[#rest + 1] = group[j] end
    -- A first bucket under a kept name (settle_first_bucket) sits in the index by that name: a
    -- new bucket at its due time named before it would come first there, though its jobs come
    -- after, and every lookup by due time and name would then go wrong. Renamed first.
    if rest[1][1] == score and bytes_greater(name, rest[1][3]) then rekey_bucket(index, name) end
    write_pieces(index, rest, DUE_BUCKET_MAX)
    return
  end
  -- The bucket and the group merged (both are in the set's order), cut into pieces.
  local stored = rcall('ZRANGE', key, '0', '-1', 'WITHSCORES')
  local merged, g = {}, 1
  for j = 1, #stored, 2 do
    local due = tonumber(stored[j + 1])
    while g <= #group and comes_after(due, stored[j], group[g][1], group[g][3]) do
      merged[#merged + 1] = group[g]
      g = g + 1
    end
    merged[#merged + 1] = {due, stored[j + 1], stored[j]}
  end
  for j = g, #group do merged[#merged + 1] = group[j] end
  rcall('DEL', key)
  if merged[1][3] == name then return write_pieces(index, merged, DUE_BUCKET_FILL, name) end
  rcall('ZREM', index, name)
  write_pieces(index, merged, DUE_BUCKET_FILL)
end

-- Calls put(bucket, its score, entry) for each of `entries` ({due, due text, member}, in the
-- set's order; none of them in the set nor naming a bucket; the set has a bucket) with the
-- bucket it belongs to, found by Redis's own search rather than by reading buckets: the entries
-- are put in the index for a moment, where the rank of each, less the entries before it, is the
-- number of buckets before it, the last of which is its bucket (the first bucket for an entry
-- before them all). That is a command per job and one per bucket found, however many buckets the
-- call's due times span, where walking the index reads each of them and bucket_for reads one per
-- step of its search. The index is as before when this returns (the replication stream and the
-- AOF carry the ZADD and the ZREM). Returns false, having changed nothing, when an entry's
-- member is already in the index: the invariants rule that out, and a rank would then be wrong.
local function buckets_by_rank(index, entries, put)
  local members = {}
  for j, entry in ipairs(entries) do members[j] = entry[3] end
  for first = 1, #members, 1000 do
    local scores = rcall('ZMSCORE', index, unpack(members, first, math.min(first + 999, #members)))
    for _, score in ipairs(scores) do
      if score then return false end
    end
  end
  rcall_each_slice('ZADD', index, zadd_args(entries))
  local before = {}
  for j, member in ipairs(members) do
    before[j] = math.max(rcall('ZRANK', index, member) - j, 0)
  end
  rcall_each_slice('ZREM', index, members)
  local rank, name, score = nil, nil, nil
  for j, entry in ipairs(entries) do
    if before[j] ~= rank then
      rank = before[j]
      local found = rcall('ZRANGE', index, rank, rank, 'WITHSCORES')
      name, score = found[1], tonumber(found[2])
    end
    put(name, score, entry)
  end
  return true
end

-- Calls put(bucket, its score, entry) for each of `entries` ({due, due text, member}, in the
-- set's order; none of them in the set) with the bucket it belongs to (nil: there is none), in
-- their order. One read of the index per due time among them (bucket_at_or_before): it settles
-- every job of that due time, unless buckets start at it after the first of them (a cut run);
-- those jobs are found by rank, all at once (buckets_by_rank). So jobs spread over a large set
-- cost one command each, and jobs that fall between the jobs of a run due at one moment
-- about two, where a search among that run's buckets took one per step.
local function put_by_lookup(index, entries, put)
  local names, scores, inside = {}, {}, {}
  local j = 1
  while j <= #entries do
    local due = entries[j][1]
    local name, score, settled = bucket_at_or_before(index, entries[j][2], entries[j][3])
    repeat
      if settled then names[j], scores[j] = name, score else inside[#inside + 1] = j end
      j = j + 1
    until j > #entries or entries[j][1] ~= due
  end
  if #inside > 0 then
    local run, taken = {}, 0
    for i, at in ipairs(inside) do run[i] = entries[at] end
    local function take(name, score)
      taken = taken + 1
      names[inside[taken]], scores[inside[taken]] = name, score
    end
    if not buckets_by_rank(index, run, take) then
      for _, at in ipairs(inside) do
        names[at], scores[at] = bucket_for(index, entries[at][2], entries[at][3])
      end
    end
  end
  for at, entry in ipairs(entries) do put(names[at], scores[at], entry) end
end

-- Adds `entries` ({due ms, due as text, member}, any order; none of them delayed already) to the
-- delayed set, with one ZADD per bucket they fall in. `first_name` is the first bucket's name, as
-- delayed_first_bucket_due read it just before (nil: no bucket). They are put in the set's order
-- first (sorted here when they come in another), so that jobs sharing buckets find them with one
-- read of the index, walked in step.
local function delayed_insert(index, entries, first_name)
  if #entries == 0 then return end
  rename_stale_first(index, first_name, entries)
  if #entries == 1 then
    local name, score = nil, nil
    put_by_lookup(index, entries, function(bucket, bucket_score)
      name, score = bucket, bucket_score
    end)
    if name == nil then return write_pieces(index, entries, DUE_BUCKET_MAX) end
    return add_to_bucket(index, name, score, entries)
  end
  for j = 2, #entries do
    if entries[j][1] < entries[j - 1][1] then
      local sorted = {}
      for i, entry in ipairs(entries) do sorted[i] = entry end
      table.sort(sorted, by_due)
      entries = sorted
      break
    end
  end
  entries = in_set_order(entries)
  local name, score = bucket_before(index, entries[1][2])
  if name == nil then
    -- No bucket at all: this call's entries make the first ones.
    write_pieces(index, entries, DUE_BUCKET_MAX)
    return
  end
  local groups, order, scores = {}, {}, {}
  local function put(bucket, bucket_score, entry)
    local group = groups[bucket]
    if not group then
      group = {}
      groups[bucket], scores[bucket] = group, bucket_score
      order[#order + 1] = bucket
    end
    group[#group + 1] = entry
  end
  local first, last = entries[1][2], entries[#entries][2]
  if rcall('ZCOUNT', index, first, last) > #entries * WALK_BUCKETS_PER_JOB then
    -- Few jobs per bucket: jobs spread over a large set, or falling between the jobs of a long
    -- run due at one moment.
    put_by_lookup(index, entries, put)
  else
    -- Many jobs per bucket: the buckets that start within the call's due times, read at once and
    -- walked in step with the jobs.
    local later = rcall('ZRANGEBYSCORE', index, first, last, 'WITHSCORES')
    local at = 1
    if later[1] == name then at = 3 end  -- `name` is the first bucket, starting in that range
    for _, entry in ipairs(entries) do
      while later[at] and not comes_after(tonumber(later[at + 1]), later[at], entry[1], entry[3]) do
        name, score = later[at], tonumber(later[at + 1])
        at = at + 2
      end
      put(name, score, entry)
    end
  end
  for _, bucket in ipairs(order) do add_to_bucket(index, bucket, scores[bucket], groups[bucket]) end
end

-- The earliest due time in the buckets, or nil when there are none: what add and place compare a
-- new job's due time with, to tell the carriers of an earlier one. Second: the first bucket's
-- name, for delayed_insert.
local function delayed_first_bucket_due(index)
  local first = rcall('ZRANGE', index, '0', '0', 'WITHSCORES')
  return first[2] and tonumber(first[2]), first[1]
end

-- The earliest due time in the delayed set (a number), or nil when it is empty.
local function delayed_earliest(index)
  local first = rcall('ZRANGE', index, '0', '0', 'WITHSCORES')
  return first[2] and tonumber(first[2])
end

-- Whether `member`, whose record says it is due at `due_ms`, is in the delayed set.
local function delayed_has(index, member, due_ms)
  local name = due_ms and bucket_for(index, integer_text(due_ms), member)
  return name ~= nil and rcall('ZSCORE', bucket_key(name), member) ~= false
end

-- Removes `member`, whose record says it is due at `due_ms`; returns whether it was delayed.
local function delayed_remove(index, member, due_ms)
  local name, score = nil, nil
  if due_ms then name, score = bucket_for(index, integer_text(due_ms), member) end
  if name and rcall('ZREM', bucket_key(name), member) == 1 then
    if name == member then
      rekey_bucket(index, name)  -- it was the bucket's first
    elseif due_ms == score then
      -- It may have been the first job of a first bucket named after a job since carried.
      settle_first_bucket(index, name, score)
    end
    return true
  end
  return false
end

-- Takes out the entries due at now_ms or earlier, at most `limit`, earliest first (equal due
-- times in member order). Returns {member, due text, member, due text, ...}. Each bucket it takes
-- from is the set's first by then (the ones before it were emptied), so settle_first_bucket
-- drops or settles it.
local function delayed_take_due(index, limit)
  local taken = {}
  local buckets = rcall('ZRANGEBYSCORE', index, '-inf', now_ms_text, 'LIMIT', '0', limit)
  for _, name in ipairs(buckets) do
    local left = limit - #taken / 2
    if left <= 0 then break end
    local key = bucket_key(name)
    local due = rcall('ZRANGEBYSCORE', key, '-inf', now_ms_text, 'WITHSCORES', 'LIMIT', '0', left)
    if #due > 0 then  -- (never 0 while the index is right; 0 would make the rank range "all")
      for i = 1, #due do taken[#taken + 1] = due[i] end
      rcall('ZREMRANGEBYRANK', key, '0', #due / 2 - 1)
    end
    settle_first_bucket(index, name, nil)
  end
  return taken
end

-- Every bucket with its index score and entries: {{name, score, {member, due, ...}}, ...}. O(jobs): for snapshots, which check the
-- invariants above (actors/storage/reads.py).
local function delayed_layout(index)
  local layout = {}
  local buckets = rcall('ZRANGE', index, '0', '-1', 'WITHSCORES')
  for j = 1, #buckets, 2 do
    layout[#layout + 1] = {buckets[j], buckets[j + 1],
                           rcall('ZRANGE', bucket_key(buckets[j]), '0', '-1', 'WITHSCORES')}
  end
  return layout
end
