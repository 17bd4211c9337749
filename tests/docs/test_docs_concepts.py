"""docs/concepts.md agrees with the code: its message table names every message class, with
sender and receiver filled in, and its actor table points at modules that exist."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

from actors.runtime import messages as _messages
from actors.runtime import shutdown

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROOT = DOCS.parent


def table_rows(heading: str) -> list[list[str]]:
    text = (DOCS / "concepts.md").read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in lines[2:]]


def message_classes() -> set[str]:
    found = {
        name
        for name, obj in inspect.getmembers(_messages, inspect.isclass)
        if dataclasses.is_dataclass(obj) and obj.__module__ == _messages.__name__
    }
    return found | {shutdown.Shutdown.__name__}


def test_the_message_table_names_every_message_once_with_sender_and_receiver() -> None:
    rows = table_rows("Messages")
    named = [re.match(r"`(\w+)", row[0]).group(1) for row in rows]  # type: ignore[union-attr]
    assert sorted(named) == sorted(message_classes())
    assert all(len(row) == 4 and all(row) for row in rows)


def test_the_actor_table_points_at_modules_that_exist() -> None:
    for row in table_rows("The actors"):
        (module,) = re.findall(r"`(actors/[\w/]+\.py)`", row[1])
        assert (ROOT / module).is_file(), module


def test_the_shutdown_sequence_has_its_diagram() -> None:
    text = (DOCS / "concepts.md").read_text()
    assert "```mermaid\nsequenceDiagram" in text.split("## Stopping", 1)[1]
