"""docs/architecture.md names rooms that exist and leaves none out.

Every path it names (``actors/...``, ``lua/...``) exists, every ``Store.method`` and ``calls.name``
it names is defined, and every module of the package appears on the page, so a module added or
renamed without its place in the architecture fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from actors.storage import calls
from actors.storage.store import Store

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def test_every_path_on_the_page_exists() -> None:
    paths = set(re.findall(r"`((?:actors|lua)/[\w/.<>*-]*)`", PAGE))
    assert paths, "the page names no paths"
    for path in paths:
        if "<" in path or "*" in path:
            continue  # a pattern, e.g. lua/<name>-<keys>.lua
        assert (ROOT / path).exists(), path


def test_every_store_method_and_call_builder_named_exists() -> None:
    for name in re.findall(r"`Store\.(\w+)`", PAGE):
        assert callable(getattr(Store, name, None)), f"Store.{name}"
    for name in set(re.findall(r"`calls\.(\w+)`", PAGE)) - {"py"}:
        assert callable(getattr(calls, name, None)), f"calls.{name}"


def test_every_module_of_the_package_has_a_place_on_the_page() -> None:
    missing = []
    for module in sorted((ROOT / "actors").rglob("*.py")):
        stem = module.stem
        if stem in ("__init__", "__main__"):
            continue
        if not re.search(rf"(?<![\w]){re.escape(stem)}(?![\w])", PAGE):
            missing.append(str(module.relative_to(ROOT)))
    assert missing == []
