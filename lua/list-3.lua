-- list: reads one page of a topic's jobs in one state without changing anything (not a transition).
-- KEYS[1] where the state's jobs are: the delayed set's index (lua/_delayed.lua), leased or dead
--         (ZSET, every topic of the shard), or the topic's ready list <prefix>ready:<topic>
--         (LIST)  KEYS[2] jobs  KEYS[3] tokens
-- ARGV[1..4] common (see _lib.lua; now_ms and trim are unused)   ARGV[5] topic
-- ARGV[6] "delayed", "zset" or "list" (what KEYS[1] is)   ARGV[7] limit: most jobs returned
-- ARGV[8] scan: most ZSET entries examined (other topics' members count too)
-- ARGV[9] after score, ARGV[10] after member: the page starts after this position; '' from the
--         start. In a ZSET a position is (score, member) and need not be a member that exists;
--         in a list it is the member last listed (a member that has left the list: from the head).
-- Returns: {complete, reached score, reached member, then per job: member, score, record or '',
-- token or ''}. complete is 1 when nothing follows the last entry examined; reached is that
-- entry's position ('' when none was examined). A list's entries have score ''.
-- Events: none.
-- Publishes: nothing.
-- @include _lib.lua
-- @include _delayed.lua
local k = {where = KEYS[1], jobs = KEYS[2], tokens = KEYS[3]}
local topic, kind = ARGV[5], ARGV[6]
local limit, scan = tonumber(ARGV[7]), tonumber(ARGV[8])
local after_score, after_member = ARGV[9], ARGV[10]
local own = topic .. '|'

-- The rank in ZSET `key` of the first entry after (after_score, after_member): the entries with
-- a lower score, then a binary search among those with an equal score, which the ZSET keeps in
-- byte order.
local function zset_start(key)
  if after_member == '' then return 0 end
  return first_rank_after(key, rcall('ZCOUNT', key, '-inf', '(' .. after_score),
                          rcall('ZCOUNT', key, '-inf', after_score), after_member)
end

-- A ZSET's entries from `rank` on, read a chunk at a time: peek() is the next {member, score}
-- or nil at the end, take() moves past it.
local function zset_source(key, rank)
  local source = {buffer = {}, at = 1}
  function source.peek()
    if source.at > #source.buffer then
      if not key then return nil end
      source.buffer = rcall('ZRANGE', key, rank, rank + math.min(scan, 500) - 1, 'WITHSCORES')
      source.at = 1
      rank = rank + #source.buffer / 2
      if #source.buffer == 0 then
        key = nil
        return nil
      end
    end
    return source.buffer[source.at], source.buffer[source.at + 1]
  end
  function source.take()
    source.at = source.at + 2
  end
  return source
end

-- The delayed set's buckets in order (lua/_delayed.lua), from the one holding the position on.
local function buckets_source(index)
  local bucket_rank = 0
  local inner
  if after_member == '' then
    inner = zset_source(nil, 0)
  else
    local name = bucket_for(index, after_score, after_member)
    if name then
      bucket_rank = rcall('ZRANK', index, name)
      inner = zset_source(bucket_key(name), zset_start(bucket_key(name)))
      bucket_rank = bucket_rank + 1
    else
      inner = zset_source(nil, 0)
    end
  end
  local source = {}
  function source.peek()
    while true do
      local member, score = inner.peek()
      if member then return member, score end
      local name = rcall('ZRANGE', index, bucket_rank, bucket_rank)[1]
      if not name then return nil end
      bucket_rank = bucket_rank + 1
      inner = zset_source(bucket_key(name), 0)
    end
  end
  function source.take()
    inner.take()
  end
  return source
end

local found = {}
local complete, reached_score, reached_member = 1, '', ''

local function take(member, score)
  found[#found + 1] = member
  found[#found + 1] = score
  found[#found + 1] = rcall('HGET', k.jobs, member) or ''
  found[#found + 1] = rcall('HGET', k.tokens, member) or ''
end

if kind == 'zset' or kind == 'delayed' then
  local source
  if kind == 'zset' then
    source = zset_source(k.where, zset_start(k.where))
  else
    source = buckets_source(k.where)
  end
  local taken, examined = 0, 0
  while taken < limit and examined < scan do
    local member, score = source.peek()
    if not member then break end
    source.take()
    examined = examined + 1
    reached_score, reached_member = score, member
    if string.sub(member, 1, #own) == own then
      take(member, score)
      taken = taken + 1
    end
  end
  if source.peek() then complete = 0 end
else
  local start = 0
  if after_member ~= '' then
    local position = rcall('LPOS', k.where, after_member)
    if position then start = position + 1 end
  end
  local members = rcall('LRANGE', k.where, start, start + limit - 1)
  for _, member in ipairs(members) do
    take(member, '')
    reached_member = member
  end
  if start + #members < rcall('LLEN', k.where) then complete = 0 end
end

local reply = {complete, reached_score, reached_member}
for _, value in ipairs(found) do reply[#reply + 1] = value end
return reply
