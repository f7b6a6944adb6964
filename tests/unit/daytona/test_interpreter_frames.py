"""Which output frames an interpreter run streams, and which it leaves to the caller to send with its answer's end.

Output streams as it comes, one chunk per line as the daemon's worker sends them; the last chunk, which arrives with
the end of the run, is left in the outcome (``unsent``) so that the service writes it together with the closing
frames (one write, one wake-up of the client).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile

from emulator.daytona.interpreter import ExecutionOutcome, Interpreters, InterpreterSettings

CODE = """
import sys, time
print("x" * 200, flush=True)
time.sleep(0.3)
print("tail")
sys.stderr.write("err\\n")
"""


def test_output_streams_and_the_last_frames_are_left_for_the_answer() -> None:
    streamed: list[dict[str, str]] = []

    async def scenario() -> ExecutionOutcome:
        interpreters = Interpreters(InterpreterSettings(python=sys.executable, uid_base=None, uid_count=1))
        with tempfile.TemporaryDirectory() as home:
            context = interpreters.default("sbx", home, {})

            async def on_frame(frame: dict[str, str]) -> None:
                streamed.append(frame)

            try:
                return await interpreters.run(context, CODE, {}, 30.0, on_frame)
            finally:
                process = context.process
                interpreters.close()
                if process is not None:
                    await process.wait()  # reaped on this loop, before it closes

    outcome = asyncio.run(scenario())
    assert outcome.stdout == "x" * 200 + "\ntail\n" and outcome.stderr == "err\n"
    # One chunk per line, as the daemon's worker sends them, in the order written, stdout and stderr interleaved.
    assert streamed == [{"type": "stdout", "text": "x" * 200 + "\n"}, {"type": "stdout", "text": "tail\n"}]
    assert outcome.unsent == [{"type": "stderr", "text": "err\n"}]  # the last, left to go with the end
