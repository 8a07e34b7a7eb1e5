"""A HUD environment and task for the Harbor round trip (docs/blog/hud.md, section 3).

``hud.integrations.harbor.export`` writes ``strawberry`` as a Harbor task folder (this folder
is its image's build context), and ``denv import harbor`` makes a denv project of that folder.
"""

from collections.abc import AsyncGenerator
from typing import Any

import hud

env = hud.Environment("count-letters")


@env.template()
async def count(word: str, letter: str) -> AsyncGenerator[Any, Any]:
    answer = yield f"How many times does '{letter}' occur in '{word}'? Answer with the number."
    yield 1.0 if str(answer).strip() == str(word.count(letter)) else 0.0


strawberry = count(word="strawberry", letter="r")
