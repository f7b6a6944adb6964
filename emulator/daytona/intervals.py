"""A sandbox's lifecycle intervals as the API takes them: from a route's path, at creation, and into its database.

Why a module of its own: the routes ``POST /sandbox/{id}/autostop|autoarchive|autodelete/{interval}`` declare the
interval a ``number`` with no pipe of their own, so the API's global ``ValidationPipe`` (``transform: true``) makes
it ``+raw``, JavaScript's conversion of the string: never a 400 for a malformed one. The service then checks the
sign (auto-stop and auto-archive only), resolves the auto-archive interval (0 is the maximum, a larger one is cut to
it) and stores the value in a Postgres ``int`` column, which refuses what is no 32-bit integer (NaN, a fraction, a
number past 2**31 - 1): a 500. Read in daytonaio/daytona v0.190 (``sandbox.controller.ts``, ``sandbox.service.ts``'s
``resolveAutoStopInterval`` and ``resolveAutoArchiveInterval``, ``main.ts``, ``sandbox.entity.ts``); the 500 is
Postgres's refusal as the API's exception filter answers any error it does not know, not observed.
"""

from __future__ import annotations

import math
import re

from .errors import ApiError

#: The API's ``maxAutoArchiveInterval`` (its ``MAX_AUTO_ARCHIVE_INTERVAL``, 30 days in minutes, by default).
MAX_AUTO_ARCHIVE_INTERVAL = 43200

#: The message of the API's exception filter for an error that is no ``HttpException`` (a failed query).
UNEXPECTED_ERROR = "An unexpected error occurred."

#: JavaScript's white space and line terminators, which ``Number(string)`` trims.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff" + "".join(map(chr, range(0x2000, 0x200B)))
_DECIMAL = re.compile(r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_RADIX = re.compile(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")
_INT4 = (-(2**31), 2**31 - 1)


def js_number(text: str) -> float:
    """``Number(text)`` in JavaScript: trimmed, empty is 0, decimal (``Infinity``, ``1e3``, ``.5``, ``1.``) or
    unsigned ``0x``/``0o``/``0b``; anything else NaN."""
    trimmed = text.strip(_JS_SPACE)
    if not trimmed:
        return 0.0
    if _DECIMAL.fullmatch(trimmed):
        return float(trimmed)
    if _RADIX.fullmatch(trimmed):
        try:
            return float(int(trimmed, 0))
        except OverflowError:  # past the largest double: JavaScript's Infinity
            return math.inf
    return math.nan


def auto_stop(value: float) -> float:
    """The API's ``resolveAutoStopInterval``."""
    if value < 0:
        raise ApiError(400, "Auto-stop interval must be non-negative")
    return value


def auto_archive(value: float) -> float:
    """The API's ``resolveAutoArchiveInterval``: 0 means the maximum, a larger value is cut to it (NaN stays NaN, as
    ``Math.min`` keeps it)."""
    if value < 0:
        raise ApiError(400, "Auto-archive interval must be non-negative")
    if value == 0:
        return MAX_AUTO_ARCHIVE_INTERVAL
    return value if math.isnan(value) else min(value, MAX_AUTO_ARCHIVE_INTERVAL)


def stored(value: float) -> int:
    """``value`` as Postgres's ``int`` column holds it, or the 500 of a query it refuses."""
    if not (float(value).is_integer() and _INT4[0] <= value <= _INT4[1]):
        raise ApiError(500, UNEXPECTED_ERROR)
    return int(value)
