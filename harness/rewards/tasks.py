"""Code-writing tasks declared as data: what the model is asked, what it may not use, and how it is checked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    """One task: the completion must define ``function`` so that it agrees with ``reference`` on every test.

    ``tests`` are argument tuples (Python literals); ``reference`` is source text defining ``function`` too, and is
    renamed in the sandbox so the completion cannot shadow it.
    """

    name: str
    prompt: str
    function: str
    tests: tuple[tuple[Any, ...], ...]
    reference: str
    banned: tuple[str, ...] = ()


SORT_NUMBERS = Task(
    name="sort_numbers",
    prompt=(
        "Write a Python function `sort_numbers(nums: list[int]) -> list[int]` that returns the numbers in ascending "
        "order. Do not use sorted(), list.sort(), heapq or any import."
    ),
    function="sort_numbers",
    tests=(([3, 1, 2],), ([],), ([5],), ([4, -2, 4, 0, -7],), ([9, 8, 7, 6, 5, 4, 3, 2, 1],)),
    reference="def sort_numbers(nums):\n    return sorted(nums)\n",
    banned=("sorted(", ".sort(", "heapq", "import ", "__import__"),
)

MAX_SUBARRAY_SUM = Task(
    name="max_subarray_sum",
    prompt=(
        "Write a Python function `max_subarray_sum(nums: list[int]) -> int` that returns the largest sum of a "
        "non-empty contiguous subarray."
    ),
    function="max_subarray_sum",
    tests=(([1, -2, 3, 4, -1],), ([-3, -1, -2],), ([5],), ([2, 2, -10, 7],), ([0, 0, 0],), ([-1, 4, -1, 4, -9, 3],)),
    reference=(
        "def max_subarray_sum(nums):\n"
        "    best = cur = nums[0]\n"
        "    for x in nums[1:]:\n"
        "        cur = max(x, cur + x)\n"
        "        best = max(best, cur)\n"
        "    return best\n"
    ),
)

IS_PALINDROME = Task(
    name="is_palindrome",
    prompt=(
        "Write a Python function `is_palindrome(text: str) -> bool` that tells whether the text reads the same "
        "backwards, ignoring case and anything that is not a letter or digit. Do not use slicing with a step."
    ),
    function="is_palindrome",
    tests=(("Racecar",), ("A man, a plan, a canal: Panama",), ("abc",), ("",), ("No lemon, no melon",), ("ab",)),
    reference=(
        "def is_palindrome(text):\n"
        "    kept = [c.lower() for c in text if c.isalnum()]\n"
        "    return kept == list(reversed(kept))\n"
    ),
    banned=("[::-1]", "import ", "__import__"),
)

FIZZBUZZ_COUNT = Task(
    name="fizzbuzz_count",
    prompt=(
        "Write a Python function `fizzbuzz_count(n: int) -> int` that returns how many integers in 1..n are "
        "divisible by 3 or by 5."
    ),
    function="fizzbuzz_count",
    tests=((1,), (3,), (15,), (100,), (0,)),
    reference="def fizzbuzz_count(n):\n    return sum(1 for i in range(1, n + 1) if i % 3 == 0 or i % 5 == 0)\n",
)

RUN_LENGTH = Task(
    name="run_length_encode",
    prompt=(
        "Write a Python function `run_length_encode(text: str) -> list[tuple[str, int]]` that returns each run of "
        "equal characters as (character, length), in order. Do not use itertools."
    ),
    function="run_length_encode",
    tests=(("aaabcc",), ("",), ("x",), ("abab",), ("zzzzzz",)),
    reference=(
        "def run_length_encode(text):\n"
        "    out = []\n"
        "    for c in text:\n"
        "        if out and out[-1][0] == c:\n"
        "            out[-1] = (c, out[-1][1] + 1)\n"
        "        else:\n"
        "            out.append((c, 1))\n"
        "    return out\n"
    ),
    banned=("itertools", "groupby", "__import__"),
)

#: Every task by name.
TASKS: dict[str, Task] = {
    t.name: t for t in (SORT_NUMBERS, MAX_SUBARRAY_SUM, IS_PALINDROME, FIZZBUZZ_COUNT, RUN_LENGTH)
}


def get_task(name: str) -> Task:
    """The task called ``name``, or a ValueError listing the known ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") from None
