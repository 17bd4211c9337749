"""The code in docs/getting-started.md, callbacks.md and cli.md runs, in order, as a reader would.

```python blocks whose first line is ``# file: NAME`` are written to NAME; other python blocks
run as scripts; every ``redelay``/``python`` line of a ```sh block runs as a command and must
exit 0 (``redelay worker`` runs in the background until the page is done, then gets SIGTERM).
Not run: ``pip install`` (the suite runs installed) and ``redelay demo`` (tests/cli/test_demo.py).
Everything runs in a temporary directory on the embedded default, a private redis-server in
``./.redelay/`` that the examples' own processes share.

docs/cli.md is checked against the parser: every subcommand and exit code is documented.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _wait import wait_until

from actors.cli.app import subcommand_names
from actors.cli.output import Exit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BLOCK_RE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NOT_RUN = ("pip install", "redelay demo")
# Prose says "a few seconds later": before these commands, wait for what the prose promises.
WAIT_BEFORE = {
    "redelay history order.timeout A1001": ("order.timeout", "A1001", "shop", "acked"),
}


def blocks(page: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK_RE.finditer((DOCS / page).read_text())]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDELAY_")}
    if "REDELAY_REDIS_SERVER" in os.environ:  # how the suite finds redis-server: keep it
        env["REDELAY_REDIS_SERVER"] = os.environ["REDELAY_REDIS_SERVER"]
    return env


def command(line: str) -> list[str]:
    argv = shlex.split(line, comments=True)
    if argv[0] == "redelay":
        return [sys.executable, "-m", "actors.cli", *argv[1:]]
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    raise AssertionError(f"unexpected command in a doc: {line}")


class Reader:
    """Follows a page in a temporary directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.env = clean_env()
        self.workers: list[subprocess.Popen[str]] = []
        self.ran: list[str] = []

    def run(self, argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            argv, cwd=self.directory, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, f"{what} failed:\n{result.stdout}\n{result.stderr}"
        self.ran.append(what)
        return result

    def python_block(self, code: str) -> None:
        first = code.splitlines()[0]
        named = re.fullmatch(r"# file: (\S+)", first)
        if named:
            (self.directory / named.group(1)).write_text(code)
            return
        self.run([sys.executable, "-c", code], f"python block starting {first!r}")

    def sh_block(self, code: str) -> None:
        for raw in code.splitlines():
            line = raw.strip()
            if not line or line.startswith("#") or line.startswith(NOT_RUN):
                continue
            for prefix, (topic, job_id, namespace, event) in WAIT_BEFORE.items():
                if line.startswith(prefix):
                    self.wait_for_event(topic, job_id, namespace, event)
            if line.startswith("redelay worker"):
                self.start_worker(command(line))
            else:
                self.run(command(line), line)

    def start_worker(self, argv: list[str]) -> None:
        worker = subprocess.Popen(
            argv,
            cwd=self.directory,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.workers.append(worker)
        assert worker.stderr is not None
        for line in worker.stderr:  # its log: wait until it says it is running
            if "worker started" in line:
                return
        raise AssertionError(f"the worker did not start: {worker.communicate(timeout=30)}")

    def history(self, topic: str, job_id: str, namespace: str) -> list[dict[str, Any]]:
        argv = command(f"redelay history {topic} {job_id} --namespace {namespace} --json")
        result = subprocess.run(
            argv, cwd=self.directory, env=self.env, capture_output=True, text=True, timeout=60
        )
        if result.returncode != 0:
            return []
        events: list[dict[str, Any]] = json.loads(result.stdout)
        return events

    def wait_for_event(self, topic: str, job_id: str, namespace: str, event: str) -> None:
        def reached() -> bool:
            events = self.history(topic, job_id, namespace)
            return bool(events) and events[-1]["event"] == event

        # Each poll runs the redelay command in a fresh interpreter.
        wait_until(reached, what=f"{topic}/{job_id} to reach {event}", poll_s=0.2)

    def stop_workers(self) -> None:
        for worker in self.workers:
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=60)
            assert worker.returncode == 0, err


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[Reader]:
    reader = Reader(tmp_path)
    yield reader
    for worker in reader.workers:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def follow(reader: Reader, page: str) -> None:
    for lang, code in blocks(page):
        if lang == "python":
            reader.python_block(code)
        elif lang == "sh":
            reader.sh_block(code)
    reader.stop_workers()


@pytest.mark.slow
def test_getting_started_runs_as_written(reader: Reader) -> None:
    follow(reader, "getting-started.md")
    assert "python first_job.py" in reader.ran
    greeting = reader.history("greetings.send", "ada", "default")
    assert [e["event"] for e in greeting] == ["added", "ready", "leased", "acked"]
    order = reader.history("order.timeout", "A1001", "shop")
    events = [e["event"] for e in order]
    assert events == ["added", "ready", "leased", "failed", "ready", "leased", "acked"]
    assert order[3]["fields"]["why"] == "inventory service down"
    assert order[-1]["fields"]["detail"] == "closed A1001"
    cancelled = reader.history("order.timeout", "A1002", "shop")
    assert [e["event"] for e in cancelled] == ["added", "cancelled"]


def test_callbacks_page_runs_as_written(reader: Reader) -> None:
    follow(reader, "callbacks.md")
    assert reader.ran, "callbacks.md ran nothing"


@pytest.mark.slow
def test_cli_page_examples_run(reader: Reader) -> None:
    follow(reader, "cli.md")
    assert any(line.startswith("redelay add order.timeout") for line in reader.ran)


# -- docs/cli.md against the parser -----------------------------------------------------------


def test_the_readme_and_the_index_list_every_subcommand() -> None:
    readme = (ROOT / "README.md").read_text().split("## Command line", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"[a-z]+", readme.split("`redelay ", 1)[1].split("`", 1)[0]))
    assert set(subcommand_names()) <= listed, set(subcommand_names()) - listed
    items = (DOCS / "index.md").read_text().split("\n- ")
    index = next(item for item in items if "(cli.md)" in item)
    listed = set(re.findall(r"`(?:redelay )?([a-z]+)`", index))
    assert set(subcommand_names()) <= listed, set(subcommand_names()) - listed


def test_cli_page_documents_every_subcommand_and_exit_code() -> None:
    text = (DOCS / "cli.md").read_text()
    names = subcommand_names()
    assert "verify" in names
    for name in names:
        assert f"## redelay {name}" in text, f"docs/cli.md has no section for {name}"
    for code in Exit:
        assert f"| {int(code)} |" in text, f"docs/cli.md does not list exit code {int(code)}"
