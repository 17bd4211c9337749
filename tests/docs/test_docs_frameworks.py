"""docs/frameworks.md: its examples need FastAPI, aiohttp or Django, which redelay does not
depend on, so they are not run here; what they take from redelay is checked instead: each block
compiles, every name imported from ``actors`` is exported, and every method called on a queue
exists on the class it is called on (AsyncDelayQueue where awaited, else DelayQueue) and takes
the keyword arguments given."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import actors
from actors import AsyncDelayQueue, DelayQueue

PAGE = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"
BLOCK_RE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def trees(text: str | None = None) -> list[ast.Module]:
    page = PAGE.read_text() if text is None else text
    return [ast.parse(block) for block in BLOCK_RE.findall(page)]


def queue_calls(tree: ast.Module) -> list[tuple[str, ast.Call, bool]]:
    """(method, call, awaited) for calls of queue methods, direct or through partial()."""
    awaited = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Await)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target = node.func
        if isinstance(target, ast.Name) and target.id == "partial" and node.args:
            target = node.args[0]
            node = ast.Call(func=target, args=node.args[1:], keywords=node.keywords)
        if isinstance(target, ast.Attribute):
            receiver = ast.unparse(target.value)
            if "queue" in receiver.lower():
                found.append((target.attr, node, id(node) in awaited))
    return found


def problems(text: str | None = None) -> list[str]:
    found = []
    for tree in trees(text):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "actors":
                found += [
                    f"actors has no {a.name}"
                    for a in node.names
                    if a.name not in actors.__all__ and a.name not in SUBMODULES
                ]
        for name, call, awaited in queue_calls(tree):
            cls = AsyncDelayQueue if awaited else DelayQueue
            method = getattr(cls, name, None)
            if method is None:
                found.append(f"{cls.__name__}.{name} does not exist")
                continue
            accepted = inspect.signature(method).parameters
            for keyword in call.keywords:
                if keyword.arg not in accepted:
                    found.append(f"{cls.__name__}.{name} takes no {keyword.arg}")
        found += outbox_problems(tree)
    return found


# Public submodules the examples import by name (``from actors import outbox``).
SUBMODULES = ("outbox",)


def outbox_module(tree: ast.Module) -> ModuleType:
    """What ``outbox`` names in a block: actors.outbox, or its Django face imported as it."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "actors.outbox"
            and any(a.name == "django" and a.asname == "outbox" for a in node.names)
        ):
            return importlib.import_module("actors.outbox.django")
    return importlib.import_module("actors.outbox")


def outbox_calls(tree: ast.Module) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and ast.unparse(node.func.value) == "outbox"
    ]


def outbox_problems(tree: ast.Module) -> list[str]:
    """``outbox.add``/``outbox.cancel`` calls: the function exists and takes the keywords."""
    outbox = outbox_module(tree)
    found = []
    for node in outbox_calls(tree):
        assert isinstance(node.func, ast.Attribute)
        function = getattr(outbox, node.func.attr, None)
        if function is None:
            found.append(f"outbox.{node.func.attr} does not exist")
            continue
        accepted = inspect.signature(function).parameters
        found += [
            f"outbox.{node.func.attr} takes no {k.arg}"
            for k in node.keywords
            if k.arg not in accepted
        ]
    return found


def test_the_page_has_the_three_frameworks_and_a_worker() -> None:
    text = PAGE.read_text()
    headings = (
        "## FastAPI",
        "## aiohttp",
        "## Django: the outbox",
        "## The worker",
        "## Transactional enqueue: the outbox",
    )
    for heading in headings:
        assert heading in text
    assert len(trees()) == 7


def test_what_the_examples_use_of_redelay_exists() -> None:
    assert sum(len(queue_calls(tree)) for tree in trees()) >= 5
    assert sum(len(outbox_calls(tree)) for tree in trees()) >= 4
    assert problems() == []


def test_a_wrong_method_or_keyword_is_noticed() -> None:
    text = PAGE.read_text()
    broken = (
        text.replace("await queue.cancel(", "await queue.remove(", 1)
        .replace("delay=PAYMENT_WINDOW_S", "wait=PAYMENT_WINDOW_S", 1)
        .replace("await outbox.cancel(", "await outbox.drop(", 1)
        .replace('delay=15 * 60)\n    return {"id": order.id}', "after=900)\n    return {}", 1)
        .replace('outbox.cancel("order.timeout", str(order_id))', "outbox.forget()", 1)
    )
    assert broken != text
    assert sorted(problems(broken)) == [
        "AsyncDelayQueue.add takes no wait",
        "AsyncDelayQueue.remove does not exist",
        "outbox.add takes no after",
        "outbox.drop does not exist",
        "outbox.forget does not exist",
    ]
