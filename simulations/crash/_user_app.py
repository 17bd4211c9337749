"""Loading a user's own handlers (``--app MODULE:ATTR``) and job bodies (``--bodies MODULE:FUNC``).

``ATTR`` is either a DelayQueue whose handlers are registered, or a function ``register(queue)``
that registers handlers on the queue it is given. The simulators copy each handler's settings
(concurrency, timeout, retry, lease) and run the handler inside their own wrapper, which records
every run in the ledger and injects the seed's handler faults.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from actors import DelayQueue
from actors.job import Job
from actors.testing import HandlerRecorder, HandlerSpec, default_topic_config, handler_specs

from .det_settings import TopicPlan

BodyFn = Callable[[str, str], Any]


def resolve(target: str, what: str) -> Any:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"{what}: {target!r} is not MODULE:ATTR (e.g. myapp.tasks:queue)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like app runners: modules in the current directory
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"{what}: cannot import {module_name}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SystemExit(f"{what}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def load_specs(target: str) -> list[HandlerSpec]:
    """The handlers registered by ``target`` (a DelayQueue, or a register(queue) function)."""
    obj = resolve(target, "--app")
    if isinstance(obj, DelayQueue):
        specs = handler_specs(obj)
    elif callable(obj):
        recorder = HandlerRecorder()
        obj(recorder)
        specs = recorder.specs
    else:
        raise SystemExit(f"--app: {target} is a {type(obj).__name__}, not a DelayQueue or function")
    if not specs:
        raise SystemExit(f"--app: {target} registers no handlers")
    return specs


def topic_plan(spec: HandlerSpec) -> TopicPlan:
    """The topic settings the worker would store for this handler (see DelayQueue.start)."""
    config = default_topic_config(spec)
    return TopicPlan(
        name=spec.topic,
        concurrency=spec.concurrency,
        timeout_ms=spec.timeout_ms,
        lease_ms=config.lease_ms,
        retry_ms=config.retry_ms,
        prefetch=spec.prefetch,
    )


def load_app_handlers(
    target: str,
) -> tuple[dict[str, Callable[[Job], Any]], tuple[TopicPlan, ...]]:
    specs = load_specs(target)
    return {s.topic: s.handler for s in specs}, tuple(topic_plan(s) for s in specs)


def load_bodies(target: str | None) -> BodyFn:
    """``FUNC(topic, job_id) -> body`` (any JSON value); the default body is {"id": job_id}."""
    if target is None:
        return lambda topic, job_id: {"id": job_id}
    fn = resolve(target, "--bodies")
    if not callable(fn):
        raise SystemExit(f"--bodies: {target} is not a function")
    body_fn: BodyFn = fn
    return body_fn
