"""actors/pytest_plugin.py: pytest finds it through the entry point, and the example of
docs/testing.md passes as written and fails when its handler is made non-idempotent.

Each run is a separate pytest process in a temporary directory (the plugin is loaded as a user's
suite loads it: installed, not by a conftest). tests/simulate/test_simulate_installed.py runs the
same example from a fresh environment with only the wheel installed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def plugin_example() -> str:
    text = (ROOT / "docs" / "testing.md").read_text()
    blocks: list[str] = re.findall(r"```py\n(# file: test_refund_crash\.py\n.*?)```", text, re.S)
    (block,) = blocks
    return block


def run_pytest(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_refund_crash.py").write_text(code)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_refund_crash.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_the_guide_example_passes_with_the_plugin(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, plugin_example())
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 passed" in done.stdout


@pytest.mark.slow
def test_the_guide_example_catches_a_handler_that_sends_twice(tmp_path: Path) -> None:
    idempotent = "if job.id not in sent:"
    assert idempotent in plugin_example()
    done = run_pytest(tmp_path, plugin_example().replace(idempotent, "if True:"))
    assert done.returncode == 1, done.stdout[-3000:]
    assert "assert ['r-1', 'r-1'] == ['r-1']" in done.stdout


@pytest.mark.slow
def test_the_fixtures_are_registered_under_their_own_names(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--fixtures", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    for name in ("redelay_redis", "redelay_clock", "redelay_queue", "redelay_harness"):
        assert re.search(rf"^{name}\b.*actors/pytest_plugin\.py", done.stdout, re.M), name
