-- Checks a lease token. A stale or missing token is rejected and the rejection is recorded, so a
-- consumer that lost its lease can be seen in the job's history.
-- Returns 0 when the token holds, -3 STALE_TOKEN when another lease holds the job, -4 NOT_LEASED.
-- @include _lib.lua
local function check_token(k, member, token, op)
  local current = rcall('HGET', k.tokens, member)
  if current == token then return CODE_OK end
  local code = CODE_NOT_LEASED
  if current then code = CODE_STALE_TOKEN end
  local attempt = 0
  local record = load_record(k.jobs, member)
  if record then attempt = attempts_failed(record) + 1 end
  audit(k.audit, EVENT_REJECTED, member, attempt, {'op', op, 'tok', token, 'code', code})
  return code
end
