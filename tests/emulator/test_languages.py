"""Languages beyond Python: the real server's commands, and its answer when a toolchain is missing."""

from __future__ import annotations

import re
import shutil

import pytest
import requests


def _run(url: str, language: str, code: str, **extra: object) -> dict[str, object]:
    answer = requests.post(url, json={"code": code, "language": language, **extra}, timeout=60)
    assert answer.status_code == 200
    body: dict[str, object] = answer.json()
    return body


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed on this machine")
def test_nodejs(sandbox_fusion_url: str) -> None:
    body = _run(sandbox_fusion_url, "nodejs", "console.log(6 * 7); console.error('warn'); process.exit(3)")
    assert body["status"] == "Failed"
    assert body["compile_result"] is None
    run = body["run_result"]
    assert isinstance(run, dict)
    assert (run["status"], run["return_code"], run["stdout"], run["stderr"]) == ("Finished", 3, "42\n", "warn\n")


def test_bash_reads_stdin_and_files(sandbox_fusion_url: str) -> None:
    body = _run(
        sandbox_fusion_url,
        "bash",
        'read x; echo "got $x"; cat in.txt; echo done > out.txt',
        stdin="hello\n",
        files={"in.txt": "ZmlsZQo="},
        fetch_files=["out.txt"],
    )
    assert body["status"] == "Success"
    assert body["run_result"]["stdout"] == "got hello\nfile\n"  # type: ignore[index]
    assert body["files"] == {"out.txt": "ZG9uZQo="}


@pytest.mark.parametrize(
    ("language", "code", "stdout"),
    [("python", "import sys; print(repr(sys.stdin.read()))", "''\n"), ("bash", "cat; echo end", "end\n")],
)
def test_stdin_utf8_cannot_encode_is_an_empty_stdin(
    sandbox_fusion_url: str, language: str, code: str, stdout: str
) -> None:
    """A lone surrogate in ``stdin``: the real server's write fails, is only logged, and the pipe is closed, so the
    program runs and reads EOF (no SandboxError)."""
    body = _run(sandbox_fusion_url, language, code, stdin="ab\ud800")
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == stdout  # type: ignore[index]


MISSING_CANDIDATES = [
    ("go", "go", 'package main\nfunc main() { println("hi") }'),
    ("D_ut", "dmd", "void main() {}"),
    ("swift", "swiftc", 'print("hi")'),
]


def test_missing_toolchain_answers_like_the_real_server(sandbox_fusion_url: str) -> None:
    """The real server runs each command through bash: a compiler that is not installed is rc 127."""
    missing = [(lang, tool, code) for lang, tool, code in MISSING_CANDIDATES if shutil.which(tool) is None]
    if not missing:
        pytest.skip("every candidate toolchain is installed here; this case needs a missing one")
    language, tool, code = missing[0]
    body = _run(sandbox_fusion_url, language, code)
    assert body["status"] == "Failed"
    compile_result = body["compile_result"]
    assert isinstance(compile_result, dict)
    assert compile_result["status"] == "Finished"
    assert compile_result["return_code"] == 127
    assert f"{tool}: command not found" in str(compile_result["stderr"])
    assert body["run_result"] is None


def test_cpp_run_with_stdin(sandbox_fusion_url: str) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed on this machine")
    code = "#include <iostream>\nint main(){int a,b; std::cin>>a>>b; std::cout<<a*b<<std::endl;}"
    body = _run(sandbox_fusion_url, "cpp", code, stdin="6 7\n")
    assert body["status"] == "Success"
    assert body["run_result"]["stdout"] == "42\n"  # type: ignore[index]


def test_path_escaping_files_are_refused(sandbox_fusion_url: str) -> None:
    body = _run(sandbox_fusion_url, "python", "print(1)", files={"../escape.txt": "eA=="})
    assert body["status"] == "SandboxError"
    assert body["run_result"] is None


@pytest.mark.parametrize("name", ["a/", "", ".", "sub/..", "../"])
@pytest.mark.parametrize("language", ["python", "bash"])
def test_a_file_name_naming_a_directory_is_upstreams_error(sandbox_fusion_url: str, language: str, name: str) -> None:
    """Upstream makes the name's parent dir, then opens the name for writing: a directory, IsADirectoryError, which
    its runner answers as a SandboxError quoting the joined path."""
    body = _run(sandbox_fusion_url, language, "echo 1", files={"ok.txt": "eA==", name: "aGk="})
    assert (body["status"], body["run_result"], body["files"]) == ("SandboxError", None, {}), body
    pattern = r"exception on running code echo 1: \[Errno 21\] Is a directory: '/\S*/tmp\w{8}/(.*)' None"
    match = re.fullmatch(pattern, str(body["message"]))
    assert match is not None, body["message"]
    assert match.group(1) == name
