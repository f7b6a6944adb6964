"""A ``multipart/form-data`` request body read as the daemon's Go reads it (``net/http``'s ``MultipartReader``,
``mime/multipart.Reader``, ``mime.ParseMediaType``), for the bulk upload.

Go reads the parts one at a time and the daemon writes each file as it comes, so what a bad body does is Go's doing
part by part: the parts before a defect are read (and written) as usual; a body that ends inside a part gives that
part's bytes up to the cut and then ``unexpected EOF``; a line where a delimiter should be ends the reading with
Go's own words. The whole body is here at once, so the reading is eager; what it yields is what Go's would.
"""

from __future__ import annotations

from dataclasses import dataclass

from .go_json import go_string

#: Go's ``peekBufferSize``: the reader's buffer, which a line longer than this (before its ``\n``) overflows.
_PEEK = 4096
#: RFC 2045's tspecials, which a token (a media type, a parameter's name or bare value) cannot hold.
_TSPECIALS = frozenset('()<>@,;:\\"/[]?=')
_ASCII_SPACE = " \t\n\v\f\r"


def _is_token_char(char: str) -> bool:
    return "\x20" < char < "\x7f" and char not in _TSPECIALS


def _consume_token(text: str) -> tuple[str, str]:
    """Go's ``consumeToken``: the leading token of ``text`` and what follows it."""
    end = 0
    while end < len(text) and _is_token_char(text[end]):
        end += 1
    return text[:end], text[end:]


def _consume_value(text: str) -> tuple[str, str]:
    """Go's ``consumeValue``: a token, or a quoted string where a backslash escapes a tspecial only (before anything
    else it is kept, as MSIE sends Windows paths); an unclosed quote or a CR or LF in it is no value."""
    if not text.startswith('"'):
        return _consume_token(text)
    value: list[str] = []
    index = 1
    while index < len(text):
        char = text[index]
        if char == '"':
            return "".join(value), text[index + 1 :]
        if char == "\\" and index + 1 < len(text) and text[index + 1] in _TSPECIALS:
            value.append(text[index + 1])
            index += 2
            continue
        if char in "\r\n":
            return "", text
        value.append(char)
        index += 1
    return "", text


def _consume_param(text: str) -> tuple[str, str, str]:
    """Go's ``consumeMediaParam``: (name lower-cased, value, rest); an empty name where there is none."""
    rest = text.lstrip(_ASCII_SPACE)
    if not rest.startswith(";"):
        return "", "", text
    name, rest = _consume_token(rest[1:].lstrip(_ASCII_SPACE))
    if not name:
        return "", "", text
    rest = rest.lstrip(_ASCII_SPACE)
    if not rest.startswith("="):
        return "", "", text
    rest = rest[1:].lstrip(_ASCII_SPACE)
    value, after = _consume_value(rest)
    if not value and after == rest:
        return "", "", text
    return name.lower(), value, after


def _valid_media_type(media: str) -> bool:
    """Go's ``checkMediaTypeDisposition``: a token, or token/token."""
    kind, rest = _consume_token(media)
    if not kind:
        return False
    if not rest:
        return True
    subtype, rest = _consume_token(rest[1:]) if rest.startswith("/") else ("", rest)
    return bool(subtype) and not rest


def parse_media_type(value: str) -> tuple[str, dict[str, str] | None] | None:
    """Go's ``mime.ParseMediaType``: None where it fails outright; the media type with None for the parameters where
    one of them does not parse (``ErrInvalidMediaParameter``), or two of a name differ. RFC 2231's ``name*`` forms
    are left out."""
    base = value.split(";", 1)[0]
    media = base.lower().strip(_ASCII_SPACE)
    if not _valid_media_type(media):
        return None
    params: dict[str, str] = {}
    rest = value[len(base) :]
    while rest:
        rest = rest.lstrip(_ASCII_SPACE)
        if not rest:
            break
        name, param, after = _consume_param(rest)
        if not name:
            if rest.strip(_ASCII_SPACE) == ";":  # a trailing semicolon
                break
            return media, None
        if params.get(name, param) != param:
            return None
        if "*" not in name:
            params[name] = param
        rest = after
    return media, params


def multipart_boundary(content_type: str | None) -> str | None:
    """The boundary ``http.Request.MultipartReader`` reads with, or None where it fails (no content type, one that
    does not parse or is neither ``multipart/form-data`` nor ``multipart/mixed``, no ``boundary``)."""
    parsed = parse_media_type(content_type or "")
    if parsed is None or parsed[1] is None or parsed[0] not in ("multipart/form-data", "multipart/mixed"):
        return None
    return parsed[1].get("boundary")


def go_quote(line: bytes) -> str:
    """``line`` as Go's ``%q`` writes it (``strconv.Quote``)."""
    out = ['"']
    for char in line.decode("utf-8", "surrogateescape"):
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is no UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(char)])
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out) + '"'


@dataclass
class Part:
    """One part as ``NextPart`` gives it: its header (names lower-cased, the first value of each), the bytes its
    reader yields, and whether the body ended inside it (the reader's ``io.ErrUnexpectedEOF``)."""

    header: dict[str, str]
    data: bytes
    cut: bool = False

    def form_name(self) -> str:
        """Go's ``Part.FormName``: the ``name`` of a ``form-data`` disposition, else empty."""
        parsed = parse_media_type(self.header.get("content-disposition", ""))
        if parsed is None or parsed[0] != "form-data" or parsed[1] is None:
            return ""
        return parsed[1].get("name", "")


class _Reader:
    """The state of one ``multipart.Reader`` over a whole body."""

    def __init__(self, body: bytes, boundary: str) -> None:
        self.body = body
        self.pos = 0
        self.parts_read = 0
        self.dash = b"--" + boundary.encode("latin-1")
        self.nl = b"\r\n"

    def _line(self, bounded: bool = True) -> tuple[bytes, bool]:
        """``bufio.Reader.ReadSlice('\\n')``: the next line, and whether the body ended before its ``\\n``;
        ``bounded``, a line longer than the buffer fails it (a header line, which textproto reads in pieces, not)."""
        end = self.body.find(b"\n", self.pos, self.pos + _PEEK if bounded else len(self.body))
        if end < 0:
            if bounded and len(self.body) - self.pos >= _PEEK:
                raise _Failed("multipart: NextPart: bufio: buffer full")
            line, self.pos = self.body[self.pos :], len(self.body)
            return line, True
        line, self.pos = self.body[self.pos : end + 1], end + 1
        return line, False

    def _is_delimiter(self, line: bytes) -> bool:
        """Go's ``isBoundaryDelimiterLine``, which switches to bare ``\\n`` lines if the first delimiter has one."""
        if not line.startswith(self.dash):
            return False
        rest = line[len(self.dash) :].lstrip(b" \t")
        if self.parts_read == 0 and rest == b"\n":
            self.nl = b"\n"
        return rest == self.nl

    def _is_final(self, line: bytes) -> bool:
        if not line.startswith(self.dash + b"--"):
            return False
        rest = line[len(self.dash) + 2 :].lstrip(b" \t")
        return not rest or rest == self.nl

    def next_delimiter(self) -> bool:
        """``NextPart``'s search for the next delimiter line: True at one, False at the close delimiter."""
        expect_new_part = False
        while True:
            line, at_end = self._line()
            if at_end:
                if self._is_final(line):
                    return False
                raise _Failed("multipart: NextPart: EOF")
            if self._is_delimiter(line):
                self.parts_read += 1
                return True
            if self._is_final(line):
                return False
            if expect_new_part:
                raise _Failed(f"multipart: expecting a new Part; got line {go_quote(line)}")
            if self.parts_read == 0:
                continue  # the preamble
            if line == self.nl:
                expect_new_part = True
                continue
            raise _Failed(f"multipart: unexpected line in Next(): {go_quote(line)}")

    def header(self) -> dict[str, str] | None:
        """``textproto.Reader.ReadMIMEHeader``: None where the body ends first (its ``io.EOF``, which ends the
        upload's loop as the close delimiter would)."""
        header: dict[str, str] = {}
        if self.body[self.pos : self.pos + 1] in (b" ", b"\t"):
            line, _ = self._line(bounded=False)
            raise _Failed("malformed MIME header initial line: " + go_string(line.rstrip(b"\r\n")))
        while True:
            if self.pos >= len(self.body):
                return None
            line, _ = self._line(bounded=False)
            line = line.rstrip(b"\n").removesuffix(b"\r")
            while self.body[self.pos : self.pos + 1] in (b" ", b"\t") and line:  # a folded line goes on
                more, _ = self._line(bounded=False)
                line = line.rstrip(b" \t") + b" " + more.rstrip(b"\n").removesuffix(b"\r").strip(b" \t")
            if not line:
                return header
            name, colon, value = line.partition(b":")
            text = name.decode("latin-1")
            valid_value = all(byte >= 0x20 or byte == 0x09 for byte in value) and 0x7F not in value
            if not colon or not text or not all(map(_is_token_char, text)) or not valid_value:
                raise _Failed("malformed MIME header line: " + go_string(line))
            header.setdefault(text.lower(), value.strip(b" \t").decode("latin-1"))

    def _match_after(self, at: int, prefix: bytes) -> bool:
        """Go's ``matchAfterPrefix`` at the body's end: whether ``prefix`` at ``at`` is a delimiter (followed by
        white space, a line end, ``--`` or the end), not bytes of the payload."""
        after = at + len(prefix)
        if after >= len(self.body):
            return True
        following = self.body[after : after + 2]
        return following[:1] in (b" ", b"\t", b"\r", b"\n") or following == b"--"

    def data(self) -> tuple[bytes, bool]:
        """A part's bytes, as its reader yields them (``scanUntilBoundary``): up to the line end before the next
        delimiter, or, where the body ends first, up to a tail that could begin one (held back), cut."""
        start = search = self.pos
        if self.body.startswith(self.dash, start):  # at the part's start a delimiter needs no line end before it
            if self._match_after(start, self.dash):
                return b"", False
            search = start + len(self.dash)
        nl_dash = self.nl + self.dash
        while (at := self.body.find(nl_dash, search)) >= 0:
            if self._match_after(at, nl_dash):
                self.pos = at
                return self.body[start:at], False
            search = at + 1
        tail = self.body.rfind(nl_dash[:1], start)
        if tail < 0 or not nl_dash.startswith(self.body[tail:]):
            tail = len(self.body)
        self.pos = tail
        return self.body[start:tail], True


class _Failed(Exception):
    """``NextPart`` returned an error other than ``io.EOF``."""


def read_parts(body: bytes, boundary: str) -> tuple[list[Part], str | None]:
    """Every part Go's reader gives for ``body``, in order, and the error that ended the reading (None where it
    ended as it should, at the close delimiter, or where the body ended inside a part's header)."""
    if not boundary:
        return [], "multipart: boundary is empty"
    reader = _Reader(body, boundary)
    parts: list[Part] = []
    try:
        while reader.next_delimiter():
            header = reader.header()
            if header is None:
                return parts, None
            data, cut = reader.data()
            parts.append(Part(header, data, cut))
    except _Failed as failed:
        return parts, str(failed)
    return parts, None


__all__ = ["Part", "go_quote", "multipart_boundary", "parse_media_type", "read_parts"]
