"""The wheel ships the Lua scripts: build it, install it into a fresh virtual environment outside
the checkout, and run one job through the installed package.

Needs network access to PyPI (the build backend and the runtime dependencies), as `make test`
does anyway.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.server.embedded import RedisProcess

ROOT = Path(__file__).resolve().parents[2]

# Runs in the fresh environment, from a directory outside the checkout, with `python -I` (no
# current directory, PYTHONPATH or user site on sys.path), so only the installed wheel is seen.
SNIPPET = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import redis

    import actors
    from actors import FakeClock, Store
    from actors.storage.scripts import lua_dir, sources

    package = Path(actors.__file__).resolve().parent
    assert "site-packages" in package.parts, package
    assert lua_dir() == package / "lua", lua_dir()
    assert (package / "py.typed").is_file()
    assert "ack" in sources() and "carry" in sources(), sorted(sources())

    client = redis.Redis(unix_socket_path=sys.argv[1])
    clock = FakeClock()
    store = Store(client, "wheel", clock)
    store.add(store.new_job("orders", "o-1", {"total": 42}, delay_ms=1_000))
    clock.advance(1_000)
    assert store.carry() == (1, None)
    (lease,) = store.lease("orders", 1, "wheel-test")
    assert lease.body == b'{"total":42}'
    assert store.ack("orders", "o-1", lease.token) == 0
    events = [fields[b"e"] for _, fields in client.xrange(store.keys.audit)]
    assert events == [b"added", b"ready", b"leased", b"acked"], events
    print(lua_dir())
    """
)


def run(args: list[str], cwd: Path, timeout_s: float = 300) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_the_installed_wheel_finds_its_scripts_and_runs_a_job(
    tmp_path: Path, redis_factory: Callable[..., RedisProcess]
) -> None:
    assert not tmp_path.is_relative_to(ROOT)
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)], tmp_path)
    (wheel,) = dist.glob("redelay-*.whl")

    env = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(env)], tmp_path)
    python = env / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", str(wheel)], tmp_path)

    server = redis_factory()
    script = tmp_path / "job.py"
    script.write_text(SNIPPET)
    printed = run([str(python), "-I", str(script), server.socket_path], tmp_path)
    assert Path(printed.strip()).is_relative_to(env)
    help_text = run([str(env / "bin" / "redelay"), "--help"], tmp_path)
    assert "redelay" in help_text
    # Issue 11 point 14: --help named docs/cli.md, which a wheel does not carry; it must name a
    # file the installed package has.
    (reference,) = (
        line.split(": ", 1)[1] for line in help_text.splitlines() if "reference" in line
    )
    assert Path(reference).is_relative_to(env) and Path(reference).is_file(), reference
    version = run([str(env / "bin" / "redelay"), "--version"], tmp_path)
    assert "0.1.0" in version
