"""The lean load generator: every request ends as one ok or one error, whatever the server does, and it never hangs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from harness.bench import loadgen

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _ok(status: int, body: bytes) -> bool:
    return status == 200 and body == b"yes"


async def _read_request(reader: asyncio.StreamReader) -> bool:
    """Read one request (head and Content-Length body); False at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return True


async def _against(handler: Handler, concurrency: int, total: int, timeout: float = 30.0) -> loadgen.LoadResult:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        return await loadgen.drive("127.0.0.1", port, "/run_code", b"{}", concurrency, total, _ok, timeout=timeout)


def _answer(body: bytes, status: int = 200, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n%s\r\n%s" % (status, len(body), extra, body)


def test_every_request_is_answered_over_keep_alive_connections() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while await _read_request(reader):
            # Split writes: the client must reassemble head and body.
            answer = _answer(b"yes")
            writer.write(answer[:7])
            await writer.drain()
            writer.write(answer[7:])
            await writer.drain()
        writer.close()

    result = asyncio.run(_against(handler, concurrency=4, total=40))
    assert (result.ok, result.errors) == (40, 0)
    assert connections == 4
    assert result.seconds > 0


@pytest.mark.parametrize(
    "answer",
    [
        _answer(b"no"),  # the check fails
        _answer(b"yes", status=500),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nyes\r\n0\r\n\r\n",  # cannot be framed
        b"HTTP/1.1 200 OK\r\n\r\n",  # no Content-Length
        b"garbage\r\n\r\n",
        b"",  # the server closes the connection without answering
    ],
)
def test_a_bad_answer_is_one_error_and_the_run_goes_on(answer: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await _read_request(reader):
            writer.write(answer)
            await writer.drain()
            if answer != _answer(b"no") and answer != _answer(b"yes", status=500):
                break  # unframeable: the client drops the connection anyway
        writer.close()

    result = asyncio.run(_against(handler, concurrency=3, total=12))
    assert (result.ok, result.errors) == (0, 12)


def test_a_server_that_never_answers_costs_one_timeout_per_request() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    result = asyncio.run(_against(handler, concurrency=2, total=4, timeout=0.2))
    assert (result.ok, result.errors) == (0, 4)


def test_a_refused_connection_fails_each_request_once() -> None:
    async def main() -> loadgen.LoadResult:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return await loadgen.drive("127.0.0.1", port, "/", b"", 3, 7, _ok)

    result = asyncio.run(main())
    assert (result.ok, result.errors) == (0, 7)


def test_bad_arguments_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        asyncio.run(loadgen.drive("127.0.0.1", 1, "/", b"", 0, 1, _ok))
    assert asyncio.run(loadgen.drive("127.0.0.1", 1, "/", b"", 4, 0, _ok)) == loadgen.LoadResult(0, 0, 0.0)


def test_against_the_emulator_on_uvloop() -> None:
    from emulator.server import EmulatorServer

    body = json.dumps({"code": "print(2+2)", "language": "python"}).encode()

    def four(status: int, answer: bytes) -> bool:
        return status == 200 and json.loads(answer)["run_result"]["stdout"] == "4\n"

    with EmulatorServer() as server:
        port = int(server.url.rsplit(":", 1)[1])
        result = loadgen.run(loadgen.drive("127.0.0.1", port, "/run_code", body, 8, 24, four))
    assert (result.ok, result.errors) == (24, 0)


@pytest.mark.parametrize(
    ("head", "parsed"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12", (200, 12)),
        (b"HTTP/1.0 429 Too Many\r\ncontent-length:  0\r\nRetry-After: 1", (429, 0)),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x", None),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked", None),
        (b"HTTP/1.1 OK", None),
        (b"SIP/2.0 200 OK\r\nContent-Length: 1", None),
    ],
)
def test_parse_head(head: bytes, parsed: tuple[int, int] | None) -> None:
    assert loadgen._parse_head(head) == parsed
