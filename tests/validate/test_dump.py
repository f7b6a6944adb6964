"""The dump writer: verl's exact line format and key order, and atomic replacement of a step's file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.rollout.dump import build_entries, decode_sample, write_step

ROOT = Path(__file__).resolve().parents[2]


def _columns() -> tuple[list[str], list[str], list[Any], list[float], dict[str, list[Any]]]:
    inputs = ["system\nq1\nassistant\n", "system\nq2 é\nassistant\n"]
    outputs = ["#### 1", "no answer ✓"]
    gts = ["1", None]
    scores = [1.0, 0.0]
    extra = {"acc": [1.0, 0.0], "batch_level": [0.5], "request_id": ["r1", "r2"], "weird": [{1, 2}, object]}
    return inputs, outputs, gts, scores, extra


def test_entries_follow_verls_key_order_and_drop_rule() -> None:
    inputs, outputs, gts, scores, extra = _columns()
    entries = build_entries(inputs, outputs, gts, scores, 7, extra)
    assert [list(e) for e in entries] == [["input", "output", "gts", "score", "step", "acc", "request_id", "weird"]] * 2
    assert [e["step"] for e in entries] == [7, 7]
    assert entries[1]["gts"] is None and entries[0]["request_id"] == "r1"


def test_a_key_named_like_a_base_key_keeps_its_place() -> None:
    entries = build_entries(["a"], ["b"], ["c"], [0.0], 1, {"score": [0.5]})
    assert list(entries[0]) == ["input", "output", "gts", "score", "step"] and entries[0]["score"] == 0.5


def test_columns_of_different_lengths_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="scores has 1 items but inputs has 2"):
        build_entries(["a", "b"], ["x", "y"], ["1", "2"], [1.0], 1)


def test_lines_are_byte_identical_to_verls_writer(tmp_path: Path) -> None:
    pytest.importorskip("verl", reason="needs the [verl] extra")
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    inputs, outputs, gts, scores, extra = _columns()
    RayPPOTrainer._write_generations(inputs, outputs, gts, scores, extra, str(tmp_path / "verl"), 3)
    ours = write_step(tmp_path / "ours", 3, build_entries(inputs, outputs, gts, scores, 3, extra))
    assert ours == tmp_path / "ours" / "3.jsonl"
    assert ours.read_bytes() == (tmp_path / "verl" / "3.jsonl").read_bytes()


def test_decode_matches_verls_batch_decode_of_padded_rows() -> None:
    pytest.importorskip("verl", reason="needs the [verl] extra")
    from harness.rollout import tiny_tokenizer
    from harness.rollout.tokenizer import encode

    tokenizer = tiny_tokenizer()
    prompt = encode(tokenizer, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")
    response = encode(tokenizer, "a <tool_call>\n{}\n</tool_call><|im_end|>")
    pad = tokenizer.pad_token_id
    batch_in, batch_out = tokenizer.batch_decode([[pad, pad, *prompt], [*response, pad]], skip_special_tokens=True)
    assert decode_sample(tokenizer, prompt, response) == (batch_in, batch_out)
    assert batch_out == "a <tool_call>\n{}\n</tool_call>"


def _old_file(directory: Path) -> bytes:
    write_step(directory, 1, [{"input": "old", "output": "old", "gts": None, "score": 0.0, "step": 1}])
    return (directory / "1.jsonl").read_bytes()


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("cannot serialise")


def test_a_failing_entry_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    old = _old_file(tmp_path)
    entries = [{"input": str(i), "step": 1} for i in range(5)] + [{"bad": Unprintable()}]
    with pytest.raises(RuntimeError, match="cannot serialise"):
        write_step(tmp_path, 1, entries)
    assert os.listdir(tmp_path) == ["1.jsonl"]
    assert (tmp_path / "1.jsonl").read_bytes() == old


def test_a_failing_write_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _old_file(tmp_path)

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_step(tmp_path, 1, [{"input": "new"}])
    assert os.listdir(tmp_path) == ["1.jsonl"]
    assert (tmp_path / "1.jsonl").read_bytes() == old


WRITER = """
import sys
from harness.rollout.dump import write_step

class Block:
    def __str__(self):
        print("ready", flush=True)
        sys.stdin.readline()  # killed while blocked here, in the middle of the step
        return "never"

entries = [{"input": "x" * 1000, "n": i} for i in range(200)] + [{"block": Block()}] + [{"n": 999}]
write_step(sys.argv[1], 1, entries)
"""


def test_a_writer_killed_mid_step_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    old = _old_file(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert os.listdir(tmp_path) == ["1.jsonl"]
    assert (tmp_path / "1.jsonl").read_bytes() == old


def test_a_new_step_replaces_the_old_one_whole_and_clears_stale_temps(tmp_path: Path) -> None:
    _old_file(tmp_path)
    (tmp_path / ".1.jsonl.dead.tmp").write_text('{"half')
    (tmp_path / ".2.jsonl.other.tmp").write_text("another step's")
    entries = [{"input": "new", "n": i} for i in range(3)]
    write_step(tmp_path, 1, entries)
    assert sorted(os.listdir(tmp_path)) == [".2.jsonl.other.tmp", "1.jsonl"]
    lines = (tmp_path / "1.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == entries
    assert (tmp_path / "1.jsonl").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
