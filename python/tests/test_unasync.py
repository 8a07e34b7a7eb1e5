"""The blocking client is generated from the asyncio client (python/scripts/unasync.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import unasync  # noqa: E402


def test_client_py_is_the_output_of_unasync() -> None:
    assert unasync.TARGET.read_text(encoding="utf-8") == unasync.generate(), (
        "src/denv/_client.py is not generated from _async_client.py: "
        "run python python/scripts/unasync.py"
    )


def test_blocks_swap_async_for_sync_code_at_its_indentation() -> None:
    source = (
        "async def f():\n"
        "    try:\n"
        "        await g()\n"
        "    # unasync: async\n"
        "    except Exception:\n"
        "        # unasync: sync\n"
        "        # except BaseException:\n"
        "        # unasync: end\n"
        "        pass\n"
    )
    out = unasync.unasync(source).removeprefix(unasync.HEADER)
    assert out == "def f():\n    try:\n        g()\n    except BaseException:\n        pass\n"


def test_names_are_replaced_and_bad_blocks_refused() -> None:
    out = unasync.unasync("x: AsyncIterable[bytes] = AsyncClient()\nawait c.aclose()\n")
    assert out.removeprefix(unasync.HEADER) == "x: Iterable[bytes] = Client()\nc.close()\n"
    with pytest.raises(ValueError, match="not closed"):
        unasync.unasync("# unasync: async\nx = 1\n")
    with pytest.raises(ValueError, match=r"_async_client.py:4: a sync line must be a comment"):
        unasync.unasync("# unasync: async\nx = 1\n# unasync: sync\ny = 2\n# unasync: end\n")
