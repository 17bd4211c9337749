"""docs/api.md documents the public API as it is.

Every name in ``actors.__all__`` has a heading or a table row; every public ``DelayQueue`` method
and property has an entry (``### `name` ``, then its signature as inline code) whose parameters,
their kinds and defaults are the code's; every public ``Store`` method is in the Store table; and
the page documents nothing that does not exist.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import actors
from actors import DelayQueue, Store

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
_HEADING_RE = re.compile(r"^#{2,4} (.*)$", re.MULTILINE)
_FIRST_CELL_RE = re.compile(r"^\| ([^|]*)\|", re.MULTILINE)
_NAME_RE = re.compile(r"`([A-Za-z_]\w*)")
# "### `add`", a blank line, then the signature as inline code (it may span lines).
_ENTRY_RE = re.compile(r"^### `(\w+)`\n\n`([^`]+)`", re.MULTILINE)
_NO_DEFAULT = object()

Parameter = tuple[str, str, Any]  # name, "positional" or "keyword", default (or _NO_DEFAULT)


def section(text: str, title: str) -> str:
    """The text under the "## <title>" heading, up to the next "## " heading."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def documented_names(text: str) -> set[str]:
    """Names in code spans of headings and of the first cell of table rows."""
    places = _HEADING_RE.findall(text) + _FIRST_CELL_RE.findall(text)
    return {name for place in places for name in _NAME_RE.findall(place)}


def public_members(cls: type) -> set[str]:
    """Public methods and properties, inherited ones too (Store's come partly from ShardPlan)."""
    return {
        name
        for base in cls.__mro__[:-1]  # without object
        for name, member in vars(base).items()
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }


def queue_entries(text: str) -> dict[str, str]:
    """Entry name -> its signature, from the DelayQueue section."""
    found: dict[str, str] = {}
    for name, code in _ENTRY_RE.findall(section(text, "DelayQueue")):
        assert name not in found, f"{name} is documented twice"
        found[name] = " ".join(code.split())
    return found


def documented_parameters(code: str) -> list[Parameter] | None:
    """The parameters of "queue.add(topic, ...) -> str"; None for a property."""
    head, _, rest = code.partition("(")
    if not rest:
        return None
    arguments = ast.parse(f"def f({rest[: rest.rindex(')')]}): pass").body[0]
    assert isinstance(arguments, ast.FunctionDef), head
    args = arguments.args
    positional = [a.arg for a in args.args]
    defaults: list[Any] = [_NO_DEFAULT] * (len(positional) - len(args.defaults))
    defaults += [ast.literal_eval(d) for d in args.defaults]
    found: list[Parameter] = [
        (name, "positional", default) for name, default in zip(positional, defaults, strict=True)
    ]
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        value = _NO_DEFAULT if kw_default is None else ast.literal_eval(kw_default)
        found.append((arg.arg, "keyword", value))
    return found


def real_parameters(fn: Callable[..., Any]) -> list[Parameter]:
    found: list[Parameter] = []
    for p in list(inspect.signature(fn).parameters.values())[1:]:  # without self
        kind = "keyword" if p.kind is inspect.Parameter.KEYWORD_ONLY else "positional"
        found.append((p.name, kind, _NO_DEFAULT if p.default is p.empty else p.default))
    return found


def entry_differences(entries: dict[str, str]) -> tuple[set[str], set[str]]:
    """(members without an entry, entries that are not members); "DelayQueue" is __init__."""
    expected = public_members(DelayQueue) | {"DelayQueue"}
    return expected - set(entries), set(entries) - expected


def signature_problems(entries: dict[str, str]) -> list[str]:
    """Each entry whose signature is not the code's, with what differs."""
    problems: list[str] = []
    for name, code in entries.items():
        if name == "DelayQueue":
            member: Any = DelayQueue.__init__
            prefix = "DelayQueue("
        else:
            member = vars(DelayQueue).get(name)
            prefix = f"queue.{name}"
        if member is None:
            problems.append(f"{name}: not a DelayQueue member")
            continue
        if not code.startswith(prefix):
            problems.append(f"{name}: the signature should start with {prefix}")
        documented = documented_parameters(code)
        if isinstance(member, property):
            if documented is not None:
                problems.append(f"{name}: a property, documented as a method")
        elif documented != real_parameters(member):
            problems.append(f"{name}: documented {documented}, code {real_parameters(member)}")
    return problems


def store_table_names(text: str) -> set[str]:
    rows = section(text, "Low level: `Store`").split("| Method |", 1)[1].split("\n\n", 1)[0]
    return {name for cell in _FIRST_CELL_RE.findall(rows) for name in _NAME_RE.findall(cell)}


def test_every_exported_name_is_documented() -> None:
    assert set(actors.__all__) - documented_names(API_DOC.read_text()) == set()


def test_every_public_delay_queue_member_has_an_entry_and_nothing_else() -> None:
    assert entry_differences(queue_entries(API_DOC.read_text())) == (set(), set())


def test_the_documented_signatures_are_the_codes() -> None:
    assert signature_problems(queue_entries(API_DOC.read_text())) == []


def test_the_store_table_names_every_public_store_method_and_nothing_else() -> None:
    assert store_table_names(API_DOC.read_text()) == public_members(Store)


# -- the checks can fail ---------------------------------------------------------------------


def test_a_missing_export_is_noticed() -> None:
    text = API_DOC.read_text().replace("### `JobInfo`", "### Job information")
    assert "JobInfo" in set(actors.__all__) - documented_names(text)


def test_a_missing_or_invented_method_is_noticed() -> None:
    invented = "### `frobnicate`\n\n`queue.frobnicate() -> None`\n\n## Which thread runs what"
    text = API_DOC.read_text().replace("### `cancel`", "### Cancelling")
    text = text.replace("## Which thread runs what", invented)
    entries = queue_entries(text)
    assert entry_differences(entries) == ({"cancel"}, {"frobnicate"})
    assert "frobnicate: not a DelayQueue member" in signature_problems(entries)


@pytest.mark.parametrize(
    ("right", "wrong"),
    [
        ("limit=100) -> list[JobInfo]", "limit=10) -> list[JobInfo]"),  # a default
        ("*, delay=None, at=None", "*, delay=None, when=None"),  # a name
        ("job_id, body=None, *,", "job_id, *, body=None,"),  # a kind
        ("`queue.running -> bool`", "`queue.running() -> bool`"),  # a property
    ],
)
def test_a_wrong_signature_is_noticed(right: str, wrong: str) -> None:
    text = API_DOC.read_text()
    assert right in text
    assert signature_problems(queue_entries(text.replace(right, wrong, 1))) != []


def test_a_missing_store_method_is_noticed() -> None:
    text = API_DOC.read_text().replace("| `expire` |", "| expiring |")
    assert public_members(Store) - store_table_names(text) == {"expire"}
