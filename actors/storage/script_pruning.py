"""Drops the helper functions an expanded script never uses, so a call does not pay for them.

EVALSHA runs a script's whole top level on every call, and in Lua 5.1 each ``local function``
there makes a closure and finds its upvalues then, whether the script calls the helper or not:
counted by callgrind on Redis 7.0.15, fifty helpers with no upvalues cost a call about 22,000
instructions, with three upvalues each about 60,000 (after forty other locals). A script keeps
only the helpers it reaches; the rest of what the includes cost a call is the helpers it does
use and the top-level statements (the slot probe, now_ms's text), which stay.

A helper here is what the scripts' style makes of one: ``local function <name>(`` at the start of
a line through the first line that is ``end`` alone. Everything else (top-level statements, the
script's own body, a local declared apart from its function) is always kept. A helper is kept
when its name appears as a name in kept code, outside comments and string literals, which cannot
call it (Redis's Lua has no ``loadstring``): a name used as a value, a field name that happens to
match, keeps the helper too, so a doubt only keeps one. Order is kept, so a helper still comes
after the ones it calls, as Lua's scoping of locals needs.
"""

from __future__ import annotations

import re


class HelperSplitError(ValueError):
    """A helper's text holds another top-level helper: its own ``end`` is not alone on a line."""


# A top-level helper: its name, and its whole text through its closing "end" line.
_HELPER_RE = re.compile(r"^local function (\w+)\(.*?^end[ \t]*$\n?", re.MULTILINE | re.DOTALL)
_NESTED_HELPER_RE = re.compile(r"^local function \w+\(", re.MULTILINE)
# Lua's comments and string literals, matched so that they are skipped, or a name (group "name").
_TOKEN_RE = re.compile(
    r"--\[(?P<c>=*)\[.*?\](?P=c)\]"  # long comment
    r"|--[^\n]*"  # line comment
    r"|\[(?P<s>=*)\[.*?\](?P=s)\]"  # long string
    r"|'(?:\\.|[^'\\\n])*'"
    r'|"(?:\\.|[^"\\\n])*"'
    r"|(?P<name>[A-Za-z_]\w*)",
    re.DOTALL,
)


def names_in(code: str) -> set[str]:
    """The names ``code`` uses, comments and string literals left out."""
    return {match["name"] for match in _TOKEN_RE.finditer(code) if match["name"]}


def prune_unused_helpers(source: str) -> str:
    """``source`` without the top-level helper functions that no kept code names."""
    helpers = list(_HELPER_RE.finditer(source))
    for match in helpers:
        # The split is by lines, so a helper closed by "end -- note" would run on through the
        # next helper, and dropping the one would drop the other unseen: refuse instead.
        if _NESTED_HELPER_RE.search(match[0], 1):
            raise HelperSplitError(
                f"helper {match[1]} runs into the next one: end it with a line that is `end` alone"
            )
    defined = {match[1] for match in helpers}
    between = [source[: helpers[0].start()]] if helpers else [source]
    between += [
        source[match.end() : (helpers[n + 1].start() if n + 1 < len(helpers) else len(source))]
        for n, match in enumerate(helpers)
    ]
    # What each helper's body names; its own name on its definition line is not a use.
    uses: dict[str, set[str]] = {}
    for match in helpers:
        body = source[match.end(1) : match.end()]
        uses[match[1]] = uses.get(match[1], set()) | (names_in(body) & defined)
    wanted = names_in("".join(between)) & defined
    pending = list(wanted)
    while pending:
        for used in uses[pending.pop()] - wanted:
            wanted.add(used)
            pending.append(used)
    kept = [between[0]]
    for match, after in zip(helpers, between[1:], strict=True):
        if match[1] in wanted:
            kept.append(match[0])
        kept.append(after)
    return "".join(kept)
