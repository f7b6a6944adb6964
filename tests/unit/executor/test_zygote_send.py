"""Our side of the zygote writes a spawn request at once, not at the end of the event loop's iteration.

When a burst of HTTP requests arrives, the server handles all of them in one loop iteration (about 0.2 ms each).
Held until that iteration ended, the first spawn waited for the whole burst while the zygote sat idle.
"""

from __future__ import annotations

import select
from typing import Any

import pytest

from emulator.executor.zygote import Zygote

from .conftest import Runner


def test_a_spawn_reaches_the_zygote_before_the_loop_iteration_ends(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert runner.run("print(1)").stdout == "1\n"  # the zygote is up
    answered: list[bool] = []
    spawn = Zygote.spawn

    def spawn_and_block(self: Zygote, msg: dict[str, Any], blobs: Any) -> Any:
        sent = spawn(self, msg, blobs)
        # Still inside the loop's iteration: the zygote's "started" reply can only come if the request left already.
        readable, _, _ = select.select([self._fd], [], [], 10.0)
        answered.append(bool(readable))
        return sent

    monkeypatch.setattr(Zygote, "spawn", spawn_and_block)
    result = runner.run("print(2 + 2)")
    assert answered == [True]
    assert result.stdout == "4\n" and result.return_code == 0
