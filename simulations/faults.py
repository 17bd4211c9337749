"""Fault primitives, driven from outside the actor system (it has no fault hooks of its own).

- An actor crash is a message the actor cannot handle: Pykka's public ``ProxyCall`` naming a
  method that does not exist. Its AttributeError, raised inside a ``tell``, kills the actor exactly
  as a bug in its ``on_receive`` would: ``on_failure`` runs, the watchdog restarts it.
- A dropped connection is ``CLIENT KILL`` on the server side.
- A worker process that stops without shutting down is every one of its actors crashed at once,
  the watchdog first so nothing restarts them, and its connections closed: its leases are
  abandoned, as a SIGKILLed process's are.
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import pykka
import redis
from pykka.messages import ProxyCall

from actors.queue import DelayQueue
from actors.runtime.listener import listener_connection_name, unblock
from actors.runtime.system import ActorSystem

CRASH = ProxyCall(attr_path=("simulated_crash",), args=(), kwargs={})

# How long to wait for a crashed actor's thread to finish (real seconds).
_DEATH_WAIT_S = 10.0


def system_of(queue: DelayQueue) -> ActorSystem | None:
    """The running actor system of a queue (the facade keeps it private; faults need it)."""
    return queue._system


def actor_refs(queue: DelayQueue) -> dict[str, pykka.ActorRef[Any]]:
    """The queue's supervised actors by name ("carrier", "pool:<topic>", ...); {} when stopped."""
    system = system_of(queue)
    if system is None:
        return {}
    try:
        return system.refs()
    except (pykka.ActorDeadError, pykka.Timeout):
        return {}


def crash(ref: pykka.ActorRef[Any]) -> bool:
    """Makes the actor raise in a ``tell``. False when it was already dead."""
    try:
        ref.tell(CRASH)
    except pykka.ActorDeadError:
        return False
    return True


def crash_actor(queue: DelayQueue, name: str, ref: pykka.ActorRef[Any], admin: redis.Redis) -> bool:
    """Crashes one actor; a listener blocked on Redis is unblocked so it reads the crash now."""
    sent = crash(ref)
    if sent and name.startswith("listener:"):
        topic = name.removeprefix("listener:")
        _unblock_until_dead(admin, listener_connection_name(queue.consumer, topic), ref)
    return sent


def _unblock_until_dead(admin: redis.Redis, connection: str, ref: pykka.ActorRef[Any]) -> None:
    # The listener may block again between our unblock and reading its mailbox: repeat briefly.
    deadline = time.monotonic() + _DEATH_WAIT_S
    while ref.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(redis.RedisError):
            unblock(admin, connection)
        time.sleep(0.002)  # polling for the actor's thread to end, bounded by the deadline


def wait_dead(refs: list[pykka.ActorRef[Any]], timeout_s: float = _DEATH_WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(r.is_alive() for r in refs):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)  # polling for actor threads to end, bounded by the deadline
    return True


def abandon(queue: DelayQueue, admin: redis.Redis) -> list[str]:
    """Stops a worker the way a SIGKILL would: no drain, no release, no final flush.

    Returns the names of actors that were crashed. The queue must not be used afterwards.
    """
    system = system_of(queue)
    if system is None:
        return []
    refs = actor_refs(queue)
    if system.watchdog is not None:
        crash(system.watchdog)
        wait_dead([system.watchdog])
    for name, ref in sorted(refs.items()):
        crash_actor(queue, name, ref, admin)
    wait_dead(list(refs.values()))
    if system.coordinator is not None:
        system.coordinator.stop(block=False)
    queue._system = None
    assert isinstance(queue.client, redis.Redis)  # the simulator runs on one server
    queue.client.connection_pool.disconnect()  # the process is gone: so are its connections
    return sorted(refs)


def kill_connections(admin: redis.Redis, variant: str, rng: random.Random) -> str:
    """``CLIENT KILL`` from the server side. ``variant``: "normal" (every ordinary connection but
    ours), "pubsub" (the carriers' wake subscriptions), or "one" (one connection at random).
    Returns what was done, for the fault log."""
    if variant == "normal":
        killed = admin.client_kill_filter(_type="normal", skipme=True)
        return f"CLIENT KILL TYPE normal: {killed} connections"
    if variant == "pubsub":
        killed = admin.client_kill_filter(_type="pubsub", skipme=True)
        return f"CLIENT KILL TYPE pubsub: {killed} connections"
    own = int(admin.client_id())
    others = sorted(int(c["id"]) for c in admin.client_list() if int(c["id"]) != own)
    if not others:
        return "CLIENT KILL ID: no other connection"
    victim = rng.choice(others)
    admin.client_kill_filter(_id=str(victim))
    return f"CLIENT KILL ID {victim}"
