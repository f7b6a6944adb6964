"""The interpreter's code sees the streams of the daemon's worker (``repl_worker.py``): ``sys.stdout`` and
``sys.stderr`` are Python-level writers that send a chunk at each newline or 1,024 characters; what reaches the
process's fds 1 and 2 (a subprocess's output, ``sys.__stdout__``) never reaches the client; ``input()`` waits, as the
worker's stdin is its command pipe; and a chunk whose JSON line passes the daemon's 1 MiB line limit stops the
daemon's reader: nothing more comes, and the timeout ends the run with the context killed.

Why it matters to a trainer: a model's program that prints through a subprocess, reads stdin, or dumps a megabyte
behaves in the real sandbox as here, not as on a plain Python, so its reward is computed on what the real service
returns.
"""

from __future__ import annotations

from emulator.server import EmulatorServer

from .conftest import interpreter_frames


def _texts(frames: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(f["type"], f["text"]) for f in frames if f["type"] in ("stdout", "stderr")]


def test_what_reaches_the_processs_fds_is_lost(graceful: EmulatorServer, api_key: str, graceful_sandbox: str) -> None:
    code = (
        "import os, subprocess, sys\n"
        "subprocess.run(['echo', 'from a subprocess'])\n"
        "os.system('echo from a shell >&2')\n"
        "os.write(1, b'raw\\n')\n"
        "print('through sys.__stdout__', file=sys.__stdout__, flush=True)\n"
        "print('mine')\n"
    )
    frames, code_ = interpreter_frames(graceful, api_key, graceful_sandbox, {"code": code})
    assert code_ == 1000 and _texts(frames) == [("stdout", "mine\n")], frames


def test_the_codes_streams_are_text_writers_with_no_file(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    for code, error in [
        ("import sys\nsys.stdout.fileno()", "UnsupportedOperation"),
        ("import sys\nsys.stdout.buffer", "AttributeError"),
    ]:
        frames, close = interpreter_frames(graceful, api_key, graceful_sandbox, {"code": code})
        assert close == 1000 and [f["name"] for f in frames if f["type"] == "error"] == [error], frames
    frames, close = interpreter_frames(
        graceful, api_key, graceful_sandbox, {"code": "import sys\nprint(sys.stdout.isatty(), sys.stdout.encoding)"}
    )
    assert _texts(frames) == [("stdout", "False utf-8\n")]


def test_chunks_are_cut_at_newlines_and_1024_characters_in_the_order_written(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    code = (
        "import sys\n"
        "print('a', end='')\n"
        "print('b', file=sys.stderr)\n"  # a stream of its own: 'a' waits in stdout's writer
        "print('c')\n"
        "sys.stdout.write('x' * 1500)\n"  # past 1,024 characters: sent without a newline
        "sys.stdout.write('tail')\n"  # sent at the end
    )
    frames, close = interpreter_frames(graceful, api_key, graceful_sandbox, {"code": code})
    assert close == 1000
    assert _texts(frames) == [("stderr", "b\n"), ("stdout", "ac\n"), ("stdout", "x" * 1500), ("stdout", "tail")]


def test_input_waits_for_the_timeout_and_the_context_lives_on(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    interpreter_frames(graceful, api_key, graceful_sandbox, {"code": "kept = 7"})
    frames, close = interpreter_frames(graceful, api_key, graceful_sandbox, {"code": "x = input()", "timeout": 1})
    assert close == 4008 and [(f["type"], f["text"]) for f in frames] == [("control", "interrupted")]
    frames, close = interpreter_frames(graceful, api_key, graceful_sandbox, {"code": "print(kept)"})
    assert close == 1000 and _texts(frames) == [("stdout", "7\n")]


# The chunk's JSON line, as the worker writes it: '{"type": "stdout", "text": "' + text + '"}' (30 characters more).
LARGEST = 1024 * 1024 - 1 - 30  # the daemon's reader holds lines of at most 1 MiB with their newline


def test_a_chunk_up_to_the_daemons_line_limit_arrives_whole(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    frames, close = interpreter_frames(
        graceful, api_key, graceful_sandbox, {"code": f"print('x' * {LARGEST}, end='')", "timeout": 5}
    )
    assert close == 1000 and _texts(frames) == [("stdout", "x" * LARGEST)]


def test_a_chunk_past_the_daemons_line_limit_silences_the_context_until_the_timeout(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    interpreter_frames(graceful, api_key, graceful_sandbox, {"code": "state = 1"})
    code = f"print('before')\nprint('x' * {LARGEST + 1}, end='')\nprint('after')"
    frames, close = interpreter_frames(graceful, api_key, graceful_sandbox, {"code": code, "timeout": 1})
    # What came before the long line was read; nothing after it; the run ended at the timeout, killed.
    assert close == 4008 and _texts(frames) == [("stdout", "before\n")], frames
    frames, close = interpreter_frames(graceful, api_key, graceful_sandbox, {"code": "print('state' in globals())"})
    assert close == 1000 and _texts(frames) == [("stdout", "False\n")]


def test_non_ascii_counts_as_the_workers_json_escapes_it(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    # 'é' is six characters in the worker's JSON ("\u00e9"): a sixth of LARGEST in 'é' is past the limit.
    count = LARGEST // 6 + 1
    frames, close = interpreter_frames(
        graceful, api_key, graceful_sandbox, {"code": f"print('é' * {count}, end='')", "timeout": 1}
    )
    assert close == 4008 and _texts(frames) == []
    frames, close = interpreter_frames(
        graceful, api_key, graceful_sandbox, {"code": f"print('é' * {LARGEST // 6}, end='')", "timeout": 5}
    )
    assert close == 1000 and _texts(frames) == [("stdout", "é" * (LARGEST // 6))]


def test_output_from_the_codes_threads_all_arrives(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    code = (
        "import threading\n"
        "def chatter(name):\n"
        "    for i in range(300):\n"
        "        print(f'{name} {i} ' + 'x' * 200)\n"
        "threads = [threading.Thread(target=chatter, args=(n,)) for n in 'ab']\n"
        "[t.start() for t in threads]\n"
        "chatter('main')\n"
        "[t.join() for t in threads]\n"
    )
    frames, close = interpreter_frames(graceful, api_key, graceful_sandbox, {"code": code, "timeout": 30})
    assert close == 1000
    # Threads share the writer, as in the worker, so a line may hold another thread's text (print writes the text
    # and the newline apart); no chunk is lost or broken on the way.
    got = "".join(str(text) for _, text in _texts(frames))
    expected = "".join(f"{n} {i} " + "x" * 200 + "\n" for n in ("a", "b", "main") for i in range(300))
    assert sorted(got) == sorted(expected)


def test_a_signal_handler_that_prints_mid_line_neither_hangs_nor_breaks_lines(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    code = (
        "import signal\n"
        "ticks = []\n"
        "def tick(*_):\n"
        "    ticks.append(1)\n"
        "    print('tick')\n"
        "signal.signal(signal.SIGALRM, tick)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)\n"
        "for i in range(20000):\n"
        "    print(i)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0)\n"
        "print('ticks', len(ticks) > 0)\n"
    )
    frames, close = interpreter_frames(graceful, api_key, graceful_sandbox, {"code": code, "timeout": 30})
    assert close == 1000, frames
    # A tick may land between a number and its newline (print writes them apart), or inside another tick, as in any
    # Python; no number is lost or sent twice.
    text = "".join(str(text) for _, text in _texts(frames)).replace("tick", "")
    assert [line for line in text.split("\n") if line] == [*map(str, range(20000)), "s True"]


def test_the_environment_the_code_sets_outlives_its_run_and_envs_are_put_back(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    first = {"code": "import os\nos.environ['MINE'] = 'kept'\nprint(os.environ['GIVEN'])", "envs": {"GIVEN": "1"}}
    frames, _ = interpreter_frames(graceful, api_key, graceful_sandbox, first)
    assert _texts(frames) == [("stdout", "1\n")]
    then = {"code": "import os\nprint(os.environ.get('MINE'), os.environ.get('GIVEN'))"}
    frames, _ = interpreter_frames(graceful, api_key, graceful_sandbox, then)
    assert _texts(frames) == [("stdout", "kept None\n")]  # as the worker: only the keys it was given are put back


def test_an_error_past_the_daemons_line_limit_silences_the_context_too(
    graceful: EmulatorServer, api_key: str, graceful_sandbox: str
) -> None:
    frames, close = interpreter_frames(
        graceful, api_key, graceful_sandbox, {"code": "raise ValueError('x' * 600000)", "timeout": 1}
    )
    assert close == 4008 and frames == []  # the error line (value and traceback) is 1.2 MB: never read
