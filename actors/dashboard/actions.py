"""The dashboard's actions, each through the store calls the CLI uses, so each lands in the
audit stream written by its script: cancel (``Store.cancel``), run now and reschedule
(``Store.add(replace=True)``, as ``redelay add --replace``), requeue and purge dead jobs
(``Store.requeue_dead`` / ``purge_dead``, in batches as ``redelay dead``), pause and resume a
topic (``Store.pause``, as ``redelay pause|resume``), remove a schedule (``Store.unschedule``, as
``redelay schedules remove``).

Every action returns one sentence for the page to show; bad input raises ValidationError
naming the field, before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from actors import _validation as validation
from actors import schedules
from actors._constants import BATCH_MAX_JOBS
from actors.errors import ValidationError
from actors.lifecycle import State
from actors.storage.store import Store

JOB_ACTIONS = ("cancel", "run_now", "reschedule")
DEAD_ACTIONS = ("requeue", "purge")
TOPIC_ACTIONS = ("pause", "resume")
SCHEDULE_ACTIONS = ("unschedule",)
ACTIONS = JOB_ACTIONS + DEAD_ACTIONS + TOPIC_ACTIONS + SCHEDULE_ACTIONS
LABELS = {
    "cancel": "Cancel",
    "run_now": "Run now",
    "reschedule": "Reschedule",
    "requeue": "Requeue",
    "purge": "Purge",
    "pause": "Pause",
    "resume": "Resume",
    "unschedule": "Remove",
}


@dataclass(frozen=True, slots=True)
class Request:
    """What a confirmed form asks for. ``jobs``: (topic, id) pairs; ``all_of``: every dead job
    of that topic (requeue, purge); ``due_ms``: the new due time (reschedule); ``topic``: the
    topic to pause or resume; ``schedule``: the schedule to remove."""

    action: str
    jobs: tuple[tuple[str, str], ...] = ()
    all_of: str | None = None
    due_ms: int | None = None
    topic: str | None = None
    schedule: str | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValidationError("action", f"is {self.action!r}", f"one of {', '.join(ACTIONS)}")
        if self.action in TOPIC_ACTIONS:
            validation.topic(self.topic)
            if self.jobs or self.all_of is not None:
                raise ValidationError("job", f"{self.action} acts on a topic, not on jobs")
            return
        if self.action in SCHEDULE_ACTIONS:
            schedules.name(self.schedule, "schedule")
            if self.jobs or self.all_of is not None:
                raise ValidationError("job", "removing a schedule acts on no job")
            return
        if self.all_of is not None and self.action not in DEAD_ACTIONS:
            raise ValidationError("all", "only requeue and purge act on a whole topic")
        if self.all_of is None and not self.jobs:
            raise ValidationError("job", "no job chosen")
        if self.action not in DEAD_ACTIONS and len(self.jobs) != 1:
            raise ValidationError("job", f"{self.action} takes one job, got {len(self.jobs)}")
        if len(self.jobs) > BATCH_MAX_JOBS:
            raise ValidationError("job", f"has {len(self.jobs)} jobs", f"{BATCH_MAX_JOBS}")
        if self.action == "reschedule" and self.due_ms is None:
            raise ValidationError("due", "reschedule needs a new due time")

    def describe(self) -> str:
        """What the confirmation page asks about."""
        label = LABELS[self.action]
        if self.action in TOPIC_ACTIONS:
            return f"{label} topic {self.topic}"
        if self.action in SCHEDULE_ACTIONS:
            return f"{label} schedule {self.schedule}"
        if self.all_of is not None:
            return f"{label} every dead job of topic {self.all_of}"
        if len(self.jobs) == 1:
            topic, job_id = self.jobs[0]
            return f"{label} job {topic}/{job_id}"
        return f"{label} {len(self.jobs)} dead jobs"


def perform(store: Store, request: Request) -> str:
    """Does what was confirmed; returns the sentence the page shows."""
    if request.action in DEAD_ACTIONS:
        return _dead(store, request)
    if request.action in TOPIC_ACTIONS:
        return _pause(store, str(request.topic), request.action == "pause")
    if request.action in SCHEDULE_ACTIONS:
        name = str(request.schedule)
        if store.unschedule(name):
            return f"Removed schedule {name} (and its pending occurrence unless it had started)."
        return f"No schedule {name}: nothing removed."
    ((topic, job_id),) = request.jobs
    if request.action == "cancel":
        outcome = store.cancel(topic, job_id)
        return {
            "removed": f"Cancelled {topic}/{job_id}.",
            "requested": f"Cancel requested for {topic}/{job_id}: it is running, and its "
            "current run ends it.",
        }.get(outcome, f"No job {topic}/{job_id}: nothing cancelled.")
    due_ms = store.clock.now_ms() if request.action == "run_now" else request.due_ms
    assert due_ms is not None  # checked by Request
    return _reschedule(store, topic, job_id, due_ms)


def _reschedule(store: Store, topic: str, job_id: str, due_ms: int) -> str:
    info = store.get(topic, job_id)
    if info is None:
        return f"No job {topic}/{job_id}: nothing changed."
    if info.state not in (State.DELAYED, State.READY):
        # A running job would be taken from its worker; a dead one is requeued instead.
        return f"{topic}/{job_id} is {info.state.value}: only delayed or ready jobs move."
    job = store.new_job(
        topic,
        job_id,
        info.body,
        due_ms=due_ms,
        retry_ms=info.retry_ms,
        callback=info.callback,
    )
    store.add(job, replace=True)
    if due_ms <= store.clock.now_ms():
        return f"{topic}/{job_id} is due now."
    return f"{topic}/{job_id} rescheduled."


def _dead(store: Store, request: Request) -> str:
    targets: Sequence[tuple[str, str]] = (
        list(store.dead_keys(request.all_of)) if request.all_of is not None else request.jobs
    )
    change = store.requeue_dead if request.action == "requeue" else store.purge_dead
    done = sum(
        change(list(targets[n : n + BATCH_MAX_JOBS]))
        for n in range(0, len(targets), BATCH_MAX_JOBS)
    )
    past = "Requeued" if request.action == "requeue" else "Purged"
    return f"{past} {done} dead job{'s' if done != 1 else ''}."


def _pause(store: Store, topic: str, pause: bool) -> str:
    changed = store.pause(topic, pause)
    if pause:
        if changed:
            return f"Paused topic {topic}: no worker leases its jobs until it is resumed."
        return f"Topic {topic} was paused already: nothing changed."
    if changed:
        return f"Resumed topic {topic}: its workers lease again."
    return f"Topic {topic} was not paused: nothing changed."
