"""What a refused result means, read from the job's own history.

A result (an ack or a fail) is refused when its token is not the job's current lease: NOT_LEASED
when the job holds none, STALE_TOKEN when another lease is current. Most often the lease was lost:
it expired, another consumer's sweeper took the job back, and it will run again (or already runs
elsewhere). But a connection can drop after Redis ran the result and before its reply arrived;
the pool then sends the result again, and that second send is refused because the first one
ended the lease (STALE_TOKEN if the id was added again and leased meanwhile). And a job can be
gone altogether (erased, or lost when Redis restarted without its data), with nothing of it left
to run.

Only the first is a lost lease worth a warning. The audit stream tells them apart: every lease
is a ``leased`` event with its token, and the event after it says how that lease ended.
"""

from __future__ import annotations

from typing import Literal

from actors.errors import ErrorCode
from actors.values import AuditEntry

Op = Literal["ack", "fail"]

# The events that end a lease, whoever ended it. A ``rejected`` event (a refused result),
# ``extended`` and ``cancel_requested`` leave it as it was.
_LEASE_ENDS = frozenset(
    {
        "acked",
        "failed",
        "dead",
        "cancelled",
        "expired",
        "lost",
        "quarantined",
        "released",
        "replaced",
        "added",
    }
)
# A ``cancelled`` event ends a leased job three ways; two of them are not its result.
_NOT_A_RESULT = frozenset({"lease-expired", "released"})


def gone(entries: list[AuditEntry]) -> bool:
    """No event of the job is left but the refusals (the one just made among them): Redis no
    longer has the job, nor a lease of it to run again."""
    return all(f.get("e") == "rejected" for _, f in entries)


def applied_reply(entries: list[AuditEntry], token: str, op: Op) -> str | ErrorCode | None:
    """What the result's first send got, when the job's history shows that it was this lease's
    own ``op`` that ended the lease: OK for an ack; for a fail, the state it left the job in
    ("delayed", "ready", "dead" or "cancelled"), as ``Store.fail_many`` answers. None when the
    lease ended some other way (the job will run again) or its events are no longer kept."""
    start = next(
        (n for n, (_, f) in enumerate(entries) if f.get("e") == "leased" and f.get("tok") == token),
        None,
    )
    if start is None:
        return None
    end = next((f for _, f in entries[start + 1 :] if f.get("e") in _LEASE_ENDS), None)
    if end is None:
        return None
    event = end["e"]
    if op == "ack":
        return ErrorCode.OK if event == "acked" and end.get("tok") == token else None
    if event == "failed":
        return end.get("to")
    if event == "dead" and end.get("via") == "failed":
        return "dead"
    if event == "cancelled" and end.get("from") == "leased" and end.get("why") not in _NOT_A_RESULT:
        return "cancelled"
    return None
