"""Fault primitives, driven from outside the actor system (it has no fault hooks of its own).

- An actor crash, and a worker process that stops without shutting down (every actor dead at
  once, the watchdog first so nothing restarts them, its connections closed, its leases
  abandoned as a SIGKILLed process's are), come from :mod:`actors.testing`.
- A dropped connection is ``CLIENT KILL`` on the server side (here).
"""

from __future__ import annotations

import random

import redis


def kill_connections(admin: redis.Redis, variant: str, rng: random.Random) -> str:
    """``CLIENT KILL`` from the server side. ``variant``: "normal" (every ordinary connection but
    ours), "pubsub" (each process's notifier subscription), or "one" (one connection at random).
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
