"""The state diagram and the effects table in docs/lifecycle.md are the model's, so the docs
cannot drift from them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import actors.model
from actors.clock import RedisSyncedClock
from actors.lifecycle import Effect
from actors.model import effects_table, state_diagram

LIFECYCLE_DOC = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"
_MERMAID_RE = re.compile(r"^```mermaid\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def mermaid_blocks(text: str) -> list[str]:
    return [block.removesuffix("\n") for block in _MERMAID_RE.findall(text)]


_EFFECTS_HEADER = "| Event | From | To | Effects on the record |"


def effects_tables(text: str) -> list[str]:
    """Every Markdown table on the page that starts with the effects table's header."""
    tables = []
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if line == _EFFECTS_HEADER:
            end = next(
                (i for i in range(n, len(lines)) if not lines[i].startswith("|")), len(lines)
            )
            tables.append("\n".join(lines[n:end]))
    return tables


def test_the_lifecycle_page_has_exactly_one_state_diagram() -> None:
    assert len(mermaid_blocks(LIFECYCLE_DOC.read_text())) == 1


def test_the_diagram_in_the_docs_is_the_models_diagram() -> None:
    [block] = mermaid_blocks(LIFECYCLE_DOC.read_text())
    assert block == state_diagram(), "regenerate it with: python -m actors.model"


def test_python_m_actors_model_prints_the_diagram() -> None:
    # The docs name this command as the way to regenerate the block.
    printed = subprocess.run(
        [sys.executable, "-m", "actors.model"], capture_output=True, text=True, check=True
    ).stdout
    assert printed == state_diagram() + "\n"


def test_a_changed_diagram_is_noticed() -> None:
    edited = LIFECYCLE_DOC.read_text().replace("leased --> dead: dead", "leased --> ready: dead")
    [block] = mermaid_blocks(edited)
    assert block != state_diagram()


def test_the_effects_table_in_the_docs_is_the_models() -> None:
    [table] = effects_tables(LIFECYCLE_DOC.read_text())
    assert table == effects_table(), "regenerate it with: python -m actors.model --effects"


def test_python_m_actors_model_effects_prints_the_table() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "actors.model", "--effects"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed == effects_table() + "\n"


def test_a_changed_effects_table_is_noticed() -> None:
    edited = LIFECYCLE_DOC.read_text().replace(
        "| `dead` | leased | dead | ends lease, counts attempt, clears suspect |",
        "| `dead` | leased | dead | ends lease, clears suspect |",
    )
    [table] = effects_tables(edited)
    assert table != effects_table()


def test_every_effect_is_explained_under_the_table() -> None:
    text = LIFECYCLE_DOC.read_text()
    for effect in Effect:
        assert f"**{effect.value}**" in text, effect


def test_the_model_points_at_the_page_that_holds_the_diagram() -> None:
    assert actors.model.__doc__ is not None
    assert "docs/lifecycle.md" in actors.model.__doc__


def test_the_clock_points_at_the_page_that_explains_its_error() -> None:
    assert RedisSyncedClock.__doc__ is not None
    assert "docs/lifecycle.md" in RedisSyncedClock.__doc__
    assert "What remains, for each process, is the error of its offset" in LIFECYCLE_DOC.read_text()
