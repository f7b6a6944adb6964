"""Entry point of the warm interpreter (a standalone script, like the zygote itself).

It imports the zygote from its cached bytecode and runs each fast-path program at its own top level, where the
zygote's recursion depth was calibrated. Run as a script, the zygote's source would be compiled at every start, and
the compiler's freed memory, about 3 MB, would stay in the heap: every fork copies the page tables of that memory and
every child's exit tears them down again.
"""

from __future__ import annotations

import sys

_fresh = frozenset(sys.modules)  # what a fresh ``python <script>`` holds before its first line

import zygote_main as _zygote  # type: ignore[import-not-found]  # noqa: E402  # sys.path[0] is our dir; the zygote drops it

del sys.modules["zygote_main"]  # not among the modules a program finds imported
_zygote._FRESH_MODULES = _fresh
del _fresh
_calibration: dict[str, int] = {}
exec(compile(_zygote._CALIBRATE_SRC, "<calibrate>", "exec"), _calibration)
_zygote._main(int(_calibration.pop("depth")))
del _calibration
_job = None
while _job is None:  # the serving loop; in a forked child a turn returns the program to run
    _job = _zygote._serve_once()
_exc = _job.error
if _exc is None and _job.code is not None:
    try:
        exec(_job.code, _job.namespace)
    except BaseException as _e:
        _exc = _e
_zygote._finish(_exc, _job)
