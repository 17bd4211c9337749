-- Due times as add and replace are sent them (ARGV): "<ms>", an absolute due time (a user's `at`,
-- or any due time under a fake clock), or "+<ms>", a delay the script counts from its now (the
-- server's TIME: lua/_lib.lua), so no producer's clock can make a delayed job due early, or late.
-- The record a producer packs starts with its own estimate of the due time (fixmap, then "d" and
-- a uint 64: actors/storage/codec.py), which the script overwrites in place.
-- @include _lib.lua

local RECORD_DUE_HEAD = '\161d\207'  -- msgpack: fixstr "d", then a uint 64

-- A call's jobs mostly share one delay (an add_many given one): each delay's due time, its text
-- and its bytes are worked out once per call, not per job (string.format alone cost more than
-- the rest of the due time's handling).
local due_by_delay, bytes_by_due = {}, {}

-- (due ms, the same as text, whether it was sent as a delay).
local function sent_due(text)
  if string.byte(text, 1) ~= 43 then return tonumber(text), text, false end  -- not "+"
  local found = due_by_delay[text]
  if not found then
    local due = now_ms + tonumber(string.sub(text, 2))
    found = {due, string.format('%d', due)}
    due_by_delay[text] = found
  end
  return found[1], found[2], true
end

-- The eight bytes of a msgpack uint 64 (big-endian) for an integer below 2^53.
local function uint64_bytes(x)
  local hi, lo = math.floor(x / 4294967296), x % 4294967296
  return string.char(math.floor(hi / 16777216) % 256, math.floor(hi / 65536) % 256,
                     math.floor(hi / 256) % 256, hi % 256, math.floor(lo / 16777216) % 256,
                     math.floor(lo / 65536) % 256, math.floor(lo / 256) % 256, lo % 256)
end

-- The record with its due time set to due_ms: eight bytes overwritten when the record starts with
-- it, as the producer packs it; else unpacked and packed again.
local function record_with_due(blob, due_ms)
  if string.sub(blob, 2, 4) == RECORD_DUE_HEAD then
    local bytes = bytes_by_due[due_ms]
    if not bytes then
      bytes = uint64_bytes(due_ms)
      bytes_by_due[due_ms] = bytes
    end
    return string.sub(blob, 1, 4) .. bytes .. string.sub(blob, 13)
  end
  local record = cmsgpack.unpack(blob)
  record[FIELD_DUE] = due_ms
  return cmsgpack.pack(record)
end

-- Whether `stored` is what a call sending `sent` wrote (same_record in _lib.lua). For a job sent
-- with a delay, whatever due time that call found: a resend counts the delay from a later now.
-- The record's created ms and its delay (`w`) still tell such a resend from a new call.
local function same_sent_record(stored, sent, delayed)
  if delayed and string.sub(stored, 2, 4) == RECORD_DUE_HEAD
      and string.sub(sent, 2, 4) == RECORD_DUE_HEAD then
    sent = string.sub(sent, 1, 4) .. string.sub(stored, 5, 12) .. string.sub(sent, 13)
  end
  return same_record(stored, sent)
end
