"""What the ``denv import KIND`` importers share.

``denv.harbor._import`` and ``denv.karotte._import``: their error type and the end of their command
line (the result printed, a refusal as an exit code).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any


class ImportRefused(ValueError):
    """A source ``denv import KIND`` cannot map, or an OUT it cannot write.

    Raised by the importers; ``denv import`` (the CLI) shows the message as its one-line error.

    Attributes:
        code: ``invalid_request`` (the source) or ``conflict`` (OUT is not empty).
    """

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.code = code


def importer_parser(kind: str, source: str) -> argparse.ArgumentParser:
    """The command line every importer takes: ``DIR OUT [--project P] [--json]``.

    Args:
        kind: The importer's package (``harbor``, ``karotte``).
        source: What DIR is, for the description (``a Harbor task folder``).

    Returns:
        The parser; the importer adds its own options.
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m denv.{kind}._import",
        description=f"Write a denv project folder from {source}.",
    )
    parser.add_argument("dir", metavar="DIR")
    parser.add_argument("out", metavar="OUT")
    parser.add_argument("--project", metavar="P")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def finish(run: Callable[[], Any], *, as_json: bool) -> int:
    """Runs an import and prints its result (a dataclass): one JSON object, or ``key: value`` lines.

    Args:
        run: The import; it returns the result or raises :class:`ImportRefused`.
        as_json: Print the result as one JSON object.

    Returns:
        0; 2 for a source that cannot be mapped, 3 for an OUT that holds something (the refusal
        is one line on stderr).
    """
    try:
        result = run()
    except ImportRefused as exc:
        print(exc, file=sys.stderr)
        return 3 if exc.code == "conflict" else 2
    if as_json:
        print(json.dumps(asdict(result)))
    else:
        for key, value in asdict(result).items():
            print(f"{key}: {' '.join(map(str, value)) if isinstance(value, list) else value}")
    return 0
