"""An ack-and-lease whose replies are still on their way (``Store.send_ack_and_lease``).

The worker's pool sends its acks and the lease of the slots they free, then starts the jobs of
the previous lease while Redis runs the new calls, and reads these replies afterwards: the
pool's own work and Redis's no longer take turns.
"""

from __future__ import annotations

from typing import Any

from actors.errors import ErrorCode
from actors.storage import calls
from actors.storage.script_batch import SentCalls
from actors.values import LeaseBatch

AckAndLeaseResult = tuple[list[ErrorCode] | Exception, LeaseBatch | Exception]


class SentAckAndLease:
    """``result()`` is what ``Store.ack_and_lease`` returns; a connection error is raised by it
    (the acks and the lease may or may not have run: leases left unread expire and are swept)."""

    __slots__ = ("_done", "_sent", "_topic")

    def __init__(
        self, topic: str, sent: SentCalls | None, done: AckAndLeaseResult | None = None
    ) -> None:
        self._topic, self._sent, self._done = topic, sent, done

    @staticmethod
    def finished(topic: str, result: AckAndLeaseResult) -> SentAckAndLease:
        """One whose calls already ran (a client without held connections runs them at once)."""
        return SentAckAndLease(topic, None, result)

    def result(self) -> AckAndLeaseResult:
        if self._sent is not None:
            self._done = parse(self._topic, self._sent.read())
            self._sent = None
        if self._done is None:
            raise RuntimeError("no result: the replies could not be read")
        return self._done


def parse(topic: str, replies: list[Any]) -> AckAndLeaseResult:
    """The ack's and the lease's replies, each error left in its place."""
    ack_reply, lease_reply = replies
    codes = ack_reply if isinstance(ack_reply, Exception) else calls.error_codes(ack_reply)
    if isinstance(lease_reply, Exception):
        return codes, lease_reply
    return codes, calls.lease_batch(topic, lease_reply)
