"""Test helpers: read the audit entries a transition wrote, and check a shard's structure."""

from __future__ import annotations

from actors.storage.store import Store
from actors.values import Snapshot

Entry = tuple[str, dict[str, str]]


class AuditCursor:
    """Remembers how far the audit stream was read, so a test sees only what one call wrote."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.last_id = "-"

    def new(self) -> list[Entry]:
        start = "-" if self.last_id == "-" else "(" + self.last_id
        entries = self.store.audit_entries(start, "+")
        if entries:
            self.last_id = entries[-1][0]
        return entries

    def events(self) -> list[str]:
        return [fields["e"] for _, fields in self.new()]

    def one(self, event: str) -> dict[str, str]:
        """The single entry the last call wrote; fails unless there is exactly one, of ``event``."""
        entries = self.new()
        assert [f["e"] for _, f in entries] == [event], entries
        return entries[0][1]


def structure_problems(store: Store, snapshot: Snapshot | None = None) -> list[str]:
    """Jobs in two structures or none, members without records, tokens without leases (from
    Store.snapshot), and stats counters that disagree with where the jobs really are."""
    if snapshot is None:
        snapshot = store.snapshot()
    problems = [
        f"{topic}/{job_id} {text}"
        for (topic, job_id), texts in sorted(snapshot.problems.items())
        for text in texts
    ]
    truth: dict[str, dict[str, int]] = {}
    for (topic, _), info in snapshot.jobs.items():
        per = truth.setdefault(topic, {"delayed": 0, "ready": 0, "leased": 0, "dead": 0})
        per[info.state] += 1
    for topic, counts in store.stats().items():
        expected = truth.get(topic, {"delayed": 0, "ready": 0, "leased": 0, "dead": 0})
        if counts != expected:
            problems.append(f"stats of {topic}: {counts} != {expected}")
    return problems
