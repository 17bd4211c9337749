"""Test helpers: read the audit entries a transition wrote, and check a shard's structure."""

from __future__ import annotations

from actors.store import Store, _s

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


def structure_problems(store: Store) -> list[str]:
    """Members that sit in no structure or in more than one, and counters that disagree.

    Store.snapshot() picks one state per job; this looks at every key, so a job that is both in
    a ready list and in the leased set (say) shows up here.
    """
    k = store.keys
    client = store.client
    jobs = {_s(m) for m in client.hkeys(k.jobs)}
    places: dict[str, list[str]] = {m: [] for m in jobs}
    problems: list[str] = []

    def put(member: str, where: str) -> None:
        if member not in places:
            problems.append(f"{member} is in {where} but has no record")
            return
        places[member].append(where)

    for m in client.zrange(k.delayed, 0, -1):
        put(_s(m), "delayed")
    for m in client.zrange(k.leased, 0, -1):
        put(_s(m), "leased")
    for m in client.zrange(k.dead, 0, -1):
        put(_s(m), "dead")
    topics = sorted(_s(t) for t in client.hkeys(k.topics))
    for topic in topics:
        for m in client.lrange(k.ready(topic), 0, -1):
            put(_s(m), f"ready:{topic}")
    for member, where in places.items():
        if len(where) != 1:
            problems.append(f"{member} is in {where or 'nothing'}")
    leased = {_s(m) for m in client.zrange(k.leased, 0, -1)}
    tokens = {_s(m) for m in client.hkeys(k.tokens)}
    if leased != tokens:
        problems.append(f"leased set {sorted(leased)} != tokens hash {sorted(tokens)}")
    truth: dict[str, dict[str, int]] = {}
    for member, where in places.items():
        if len(where) == 1:
            state = where[0].split(":", 1)[0]
            topic = member.split("|", 1)[0]
            per = truth.setdefault(topic, {"delayed": 0, "ready": 0, "leased": 0, "dead": 0})
            per[state] += 1
    for topic, counts in store.stats().items():
        expected = truth.get(topic, {"delayed": 0, "ready": 0, "leased": 0, "dead": 0})
        if counts != expected:
            problems.append(f"stats of {topic}: {counts} != {expected}")
    return problems
