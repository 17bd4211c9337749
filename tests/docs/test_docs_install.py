"""The install instructions in README.md and docs/getting-started.md can be followed: redelay is
not on PyPI, so they install from a checkout or a wheel built from it, the extras and the wheel's
name they mention are the project's, and the README's two set-up commands are Makefile targets.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/getting-started.md"]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
NAME = PYPROJECT["project"]["name"]
VERSION = PYPROJECT["project"]["version"]
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])

# `pip install X` (in code blocks or inline code); X up to the end of the command or a comment.
PIP_INSTALL = re.compile(r"pip install (?:-e )?('[^']+'|\"[^\"]+\"|[^\s`#]+)")


def install_targets(page: str) -> list[str]:
    return [t.strip("'\"") for t in PIP_INSTALL.findall((ROOT / page).read_text())]


def split_extras(target: str) -> tuple[str, set[str]]:
    base, _, extras = target.partition("[")
    return base, {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}


@pytest.mark.parametrize("page", PAGES)
def test_every_pip_install_names_a_checkout_or_a_built_wheel(page: str) -> None:
    targets = install_targets(page)
    assert targets, f"{page} says nothing about installing"
    wheel = f"dist/{NAME}-{VERSION}-py3-none-any.whl"
    for target in targets:
        base, extras = split_extras(target)
        # The bare name only appears when the page says it does not work yet.
        if base == NAME:
            text = (ROOT / page).read_text()
            line = next(line for line in text.splitlines() if f"pip install {target}" in line)
            assert "not" in line, f"{page}: `pip install {target}` as if it were published"
            continue
        assert base in (".", wheel), f"{page}: `pip install {target}` is not a checkout or wheel"
        assert extras <= EXTRAS, f"{page}: unknown extras {extras - EXTRAS}"


@pytest.mark.parametrize("page", PAGES)
def test_the_wheel_command_makes_the_wheel_the_page_installs(page: str) -> None:
    text = (ROOT / page).read_text()
    assert "pip wheel --no-deps -w dist ." in text
    assert f"{NAME}-{VERSION}-py3-none-any.whl" in text


def test_the_readmes_setup_commands_are_makefile_targets() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("test", "demo"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"no `{target}` target"


# Extras for working on redelay itself, not for its users.
DEVELOPMENT_EXTRAS = {"test", "bench"}


def test_the_readme_names_every_extra_a_user_installs() -> None:
    install = (ROOT / "README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `([a-z]+)` \|", install, re.MULTILINE))
    assert named == EXTRAS - DEVELOPMENT_EXTRAS


def test_every_install_hint_in_the_code_can_be_followed() -> None:
    """A message telling a user to `pip install 'redelay[x]'` cannot work while redelay is not
    on PyPI: hints name a checkout, a wheel, or the packages themselves."""
    sources = [*(ROOT / "actors").rglob("*.py"), *(ROOT / "simulations").rglob("*.py")]
    hints = [
        (path, target.strip("'\""))
        for path in sources
        for target in PIP_INSTALL.findall(path.read_text())
    ]
    assert len(hints) >= 5, hints  # the extras' hints were found at all
    for path, target in hints:
        base, extras = split_extras(target)
        assert base != NAME, f"{path.relative_to(ROOT)}: pip install {target}"
        assert extras <= EXTRAS, f"{path.relative_to(ROOT)}: unknown extras {extras - EXTRAS}"
