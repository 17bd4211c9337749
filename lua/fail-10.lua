-- fail: ends failed attempts of leased jobs; each is retried on its schedule or becomes dead.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] leased  KEYS[4] tokens  KEYS[5] dead  KEYS[6] topics
-- KEYS[7] counts  KEYS[8] audit
-- KEYS[9] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[10] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] wake channel   ARGV[6] n
-- ARGV[7..] n groups of 5: member, token, reason, retry_after_ms (-1: follow the schedule),
--   traceback ("" for none; kept in the record's `t` and the event's `tb`)
-- Returns: per job, its new state ('delayed', 'ready', 'dead', 'cancelled') or an error code
-- -3 STALE_TOKEN, -4 NOT_LEASED.
-- Events: failed {due, why, to, tb?} or dead {why, via=failed, tb?} or cancelled {why, from=leased};
-- rejected {op=fail}. Touches ready lists <prefix>ready:<topic> (same hash tag).
-- Publishes: on <prefix>wake (ARGV[5]; "" for none), a retry's due time when it is earlier than
-- every delayed job; on <prefix>ready, a topic whose ready list was empty (a retry due at once).
-- @include _lib.lua
-- @include _token.lua
-- @include _retry.lua
local k = {jobs = KEYS[1], delayed = KEYS[2], leased = KEYS[3], tokens = KEYS[4], dead = KEYS[5],
           topics = KEYS[6], counts = KEYS[7], audit = KEYS[8]}
use_history_index(KEYS[9], KEYS[10])
buffer_history_index()
local wake_channel = ARGV[5]
local n = tonumber(ARGV[6])
local result = {}
for j = 0, n - 1 do
  local base = 7 + j * 5
  local member, token, reason = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local override_ms = tonumber(ARGV[base + 3])
  local trace = ARGV[base + 4]
  local code = check_token(k, member, token, 'fail')
  if code == CODE_OK then
    local record = load_record(k.jobs, member)
    result[#result + 1] = end_failed_attempt(k, member, record, EVENT_FAILED, reason, override_ms,
                                             wake_channel, trace)
  else
    result[#result + 1] = code
  end
end
flush_history_index()
rotate_history_index()
return result
