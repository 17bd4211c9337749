-- list: reads one page of a topic's jobs in one state without changing anything (not a transition).
-- KEYS[1] where the state's jobs are: delayed, leased or dead (ZSET, every topic of the shard), or
--         the topic's ready list <prefix>ready:<topic> (LIST)  KEYS[2] jobs  KEYS[3] tokens
-- ARGV[1..4] common (see _lib.lua; now_ms and trim are unused)   ARGV[5] topic
-- ARGV[6] "zset" or "list" (what KEYS[1] is)   ARGV[7] limit: most jobs returned
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
local k = {where = KEYS[1], jobs = KEYS[2], tokens = KEYS[3]}
local topic, kind = ARGV[5], ARGV[6]
local limit, scan = tonumber(ARGV[7]), tonumber(ARGV[8])
local after_score, after_member = ARGV[9], ARGV[10]
local own = topic .. '|'

-- Byte order, as a ZSET orders equal scores (Lua's < follows the server's locale).
local function bytes_greater(a, b)
  for j = 1, math.min(#a, #b) do
    local x, y = string.byte(a, j), string.byte(b, j)
    if x ~= y then return x > y end
  end
  return #a > #b
end

-- The rank of the first entry after (after_score, after_member): the entries with a lower score,
-- then a binary search among those with an equal score, which the ZSET keeps in byte order.
local function zset_start()
  if after_member == '' then return 0 end
  local low = rcall('ZCOUNT', k.where, '-inf', '(' .. after_score)
  local high = rcall('ZCOUNT', k.where, '-inf', after_score)
  while low < high do
    local middle = math.floor((low + high) / 2)
    if bytes_greater(rcall('ZRANGE', k.where, middle, middle)[1], after_member) then
      high = middle
    else
      low = middle + 1
    end
  end
  return low
end

local found = {}
local complete, reached_score, reached_member = 1, '', ''

local function take(member, score)
  found[#found + 1] = member
  found[#found + 1] = score
  found[#found + 1] = rcall('HGET', k.jobs, member) or ''
  found[#found + 1] = rcall('HGET', k.tokens, member) or ''
end

if kind == 'zset' then
  local size = rcall('ZCARD', k.where)
  local rank = zset_start()
  local taken, examined = 0, 0
  while taken < limit and examined < scan and rank < size do
    local chunk = math.min(scan - examined, 500)
    local entries = rcall('ZRANGE', k.where, rank, rank + chunk - 1, 'WITHSCORES')
    if #entries == 0 then break end
    for j = 1, #entries, 2 do
      local member, score = entries[j], entries[j + 1]
      rank, examined = rank + 1, examined + 1
      reached_score, reached_member = score, member
      if string.sub(member, 1, #own) == own then
        take(member, score)
        taken = taken + 1
        if taken == limit then break end
      end
    end
  end
  if rank < size then complete = 0 end
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
