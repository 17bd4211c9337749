-- cancel: removes a job that is delayed, ready or dead; a leased job is only marked, so that its
-- consumer's ack or failure (or the lease's expiry) ends it and nothing retries it.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] leased  KEYS[4] tokens  KEYS[5] dead  KEYS[6] counts
-- KEYS[7] audit
-- KEYS[8] history (HASH: the audit stream's per-job index, see _lib.lua)
-- KEYS[9] history-previous (its previous generation)
-- ARGV[1..4] common (see _lib.lua)   ARGV[5] member
-- Returns: 0 no such job, 1 removed, 2 cancel requested on a leased job (also when repeated).
-- Events: cancelled {from} when removed; cancel_requested {} the first time a leased job is marked.
-- Touches the job's ready list <prefix>ready:<topic> (same hash tag) when it removes a ready job.
-- Publishes: nothing.
-- @include _lib.lua
-- @include _remove.lua
local k = {jobs = KEYS[1], delayed = KEYS[2], leased = KEYS[3], tokens = KEYS[4], dead = KEYS[5],
           counts = KEYS[6], audit = KEYS[7]}
use_history_index(KEYS[8], KEYS[9])
local member = ARGV[5]
local record = load_record(k.jobs, member)
if not record then return 0 end
local attempt = attempts_failed(record) + 1
if job_state(k, member, record) == STATE_LEASED then
  if not record[FIELD_CANCEL] then
    record[FIELD_CANCEL] = 1
    save_record(k.jobs, member, record)
    audit(k.audit, EVENT_CANCEL_REQUESTED, member, attempt, {})
  end
  return 2
end
local was = unlink(k, member, record)
keep_added_entry(member, record)
rcall('HDEL', k.jobs, member)
audit(k.audit, EVENT_CANCELLED, member, attempt, {'from', was})
rotate_history_index()
return 1
