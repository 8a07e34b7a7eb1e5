"""Writes ``src/denv/_client.py`` (the blocking client) from ``src/denv/_async_client.py``.

The asyncio client is the one source: the blocking client is the same code with ``async`` and
``await`` taken out and the asyncio names replaced by their blocking counterparts (table
below). Where the two really differ, the async source carries both, in blocks:

    # unasync: async
    sender = asyncio.create_task(send_stdin())
    # unasync: sync
    # sender = threading.Thread(target=send_stdin, daemon=True)
    # sender.start()
    # unasync: end

The async lines are dropped and the commented sync lines uncommented. The output is formatted
with ruff. ``python/tests/test_unasync.py`` fails when ``_client.py`` is not what this writes.

Usage: python python/scripts/unasync.py [--check]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "denv" / "_async_client.py"
TARGET = ROOT / "src" / "denv" / "_client.py"

HEADER = (
    "# Generated from _async_client.py by python/scripts/unasync.py: edit that file, then run\n"
    "# the script (python/tests/test_unasync.py checks that this file is its output).\n"
)

#: (pattern, replacement), applied in order to every line outside the blocks.
REPLACEMENTS: list[tuple[str, str]] = [
    (
        r"An asyncio client of the denv control plane\.",
        "A blocking client of the denv control plane.",
    ),
    (r"Use it as an async context manager", "Use it as a context manager"),
    (
        r"Close the generator \(``aclose``, or ``contextlib\.aclosing``\) when stopping early\.",
        "Close the iterator (or read it to the end) to release the connection.",
    ),
    (r"\basync def ", "def "),
    (r"\basync with ", "with "),
    (r"\basync for ", "for "),
    (r"\bawait ", ""),
    (r"\bAsyncGenerator\[(.+?), None\]", r"Iterator[\1]"),
    (r"\bAsyncGenerator\b", "Iterator"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncBaseTransport\b", "BaseTransport"),
    (r"\bAsync(?=(Client|Tunnel|PortForward|Iterable)\b)", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\baread\(", "read("),
    (r"\baiter_lines\(", "iter_lines("),
    (r"\baiter_bytes\(", "iter_bytes("),
    (r"\bwebsockets\.asyncio\.client\b", "websockets.sync.client"),
    (r"\basyncio\.sleep\(", "time.sleep("),
]

_MARK = re.compile(r"^\s*# unasync: (async|sync|end)\s*$")


def unasync(text: str) -> str:
    """The blocking client's source from the asyncio client's.

    In a block, the sync lines are moved to the indentation of the async lines they replace
    (the formatter indents a comment like the statement after it, not like the one it stands
    for).

    Args:
        text: ``_async_client.py``.

    Returns:
        ``_client.py`` before formatting.

    Raises:
        ValueError: A block is not closed, or a sync line is not a comment.
    """
    out: list[str] = []
    state = "both"
    async_lines: list[str] = []
    sync_lines: list[str] = []
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        mark = _MARK.match(line)
        if mark:
            state = {"async": "async", "sync": "sync", "end": "both"}[mark.group(1)]
            if state == "both":
                out.extend(_convert(x) for x in _reindent(sync_lines, async_lines))
                async_lines, sync_lines = [], []
            continue
        if state == "async":
            async_lines.append(line)
        elif state == "sync":
            stripped = line.lstrip(" ")
            indent = line[: len(line) - len(stripped)]
            if stripped.startswith("# "):
                sync_lines.append(indent + stripped[2:])
            elif stripped.rstrip("\n") == "#":
                sync_lines.append("\n")
            else:
                raise ValueError(f"_async_client.py:{number}: a sync line must be a comment")
        else:
            out.append(_convert(line))
    if state != "both":
        raise ValueError("_async_client.py: a '# unasync:' block is not closed")
    return HEADER + "".join(out)


def _indent(lines: list[str]) -> int | None:
    widths = [len(x) - len(x.lstrip(" ")) for x in lines if x.strip()]
    return min(widths) if widths else None


def _reindent(sync_lines: list[str], async_lines: list[str]) -> list[str]:
    have, want = _indent(sync_lines), _indent(async_lines)
    if have is None or want is None or have == want:
        return sync_lines
    if want > have:
        return [" " * (want - have) + x if x.strip() else x for x in sync_lines]
    return [x[have - want :] if x.strip() else x for x in sync_lines]


def _convert(line: str) -> str:
    for pattern, replacement in REPLACEMENTS:
        line = re.sub(pattern, replacement, line)
    return line


def formatted(text: str) -> str:
    """``text`` with its imports sorted and formatted by ruff (the project's settings)."""
    ruff = str(Path(sys.executable).parent / "ruff")
    for args in (
        [
            "check",
            "--select",
            "I,SIM117,UP028",
            "--fix",
            "--unsafe-fixes",
            "--exit-zero",
            "--quiet",
        ],
        ["format"],
    ):
        text = subprocess.run(
            [ruff, *args, "--stdin-filename", str(TARGET), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def generate() -> str:
    """What ``_client.py`` must hold."""
    return formatted(unasync(SOURCE.read_text(encoding="utf-8")))


def main(argv: list[str]) -> int:
    """Writes _client.py, or with --check says whether it is up to date (exit 1 if not)."""
    text = generate()
    if "--check" in argv:
        if TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is not generated from {SOURCE.name}: run {sys.argv[0]}")
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
