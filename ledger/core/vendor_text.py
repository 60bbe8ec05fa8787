"""What a destination said, masked before any row keeps it: ``masked`` is the one function every
path that stores a destination's text goes through (``ledger.core.privacy.scrub_failure`` for an
answer and its message, ``scrubbed_text`` for a lookup's reason, ``secrets_masked`` for an audit
run's error).

A destination may quote what it was sent: a customer's id, and sometimes the credential itself,
written another way. So ``masked`` reads the text as written and decoded: JSON's string escapes
(``\\u0073``, ``\\/``), ``\\x73`` escapes, percent-encoding (``%2F``) and HTML entities (``&#115;``,
``&#x73;``, ``&lowbar;``), each in turn and again, escapes inside escapes (JSON in JSON, a
percent-encoded ``\\u``), up to ``ROUNDS`` times. In each reading it finds

- each hidden value where it appears whole, case aside (an action's sensitive values, a credential);
- each run of ``RUN`` characters or more of one of a credential's forms (as it is, its hex, its
  UTF-16 hex, and its base64, base64url and base32 at each alignment it may take inside a longer
  encoding, which covers ``Basic base64(user:secret)``), so a truncated echo is caught; a ``Bearer``
  or percent-encoded one is caught as it is or decoded;
- the same runs with separators (spaces, dashes, colons…), or everything but letters and digits,
  left out of both, so a credential (or its hex) split into short groups is caught;

and replaces the characters of the text they were read from with ``MASK``. Everything else is kept
as it came: a JSON body stays JSON (a masked run takes whole escape sequences, inside a string),
and a text with nothing hidden in it is kept byte for byte. Pure: no database, no settings.

``opaque_blanked`` is the stricter pass for whoever does not configure the destination
(``privacy.answer_shown_to``): in the same readings, it blanks every long opaque string, in case a
form of the credential no list foresees hides in one.
"""

import base64
import codecs
import html
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MASK = "••••"
# A run of a credential's form this long is masked wherever it appears; a shorter one is kept (a
# key's common prefix, a vendor's "ends in 4242"), or every short word could be masked.
RUN = 8
# Each encoding is decoded again this many times at most: escapes inside escapes three deep are
# already far from what a vendor writes, and a text built to nest deeper must not cost more.
ROUNDS = 6
# The stricter pass blanks a run of this many characters of the base64, base32 and hex alphabets.
OPAQUE_RUN = 16

_JSON_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')
_JSON_CHARS = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_X_ESCAPES = re.compile(r"(?:\\x[0-9a-fA-F]{2})+")
_PERCENT = re.compile(r"(?:%[0-9a-fA-F]{2})+")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7};?|#[xX][0-9a-fA-F]{1,6};?|[A-Za-z][A-Za-z0-9]{1,31};)")
# How a credential is split into short groups: by separators, or by any character but a letter or
# a digit. Each is left out of both the text and the credential's forms before runs are compared;
# the first keeps a credential's own punctuation, the second catches any other separator.
_APART = (re.compile(r"[\s:.,|-]+"), re.compile(r"[^0-9a-z]+"))
_OPAQUE = re.compile(rf"[0-9A-Za-z+/=_-]{{{OPAQUE_RUN},}}")
_WORD_SEPARATORS = re.compile(r"[_/-]+")
# A word in an identifier: letters with one short group of digits at most (``base64url``, ``v2``),
# or a short number (``2026``).
_WORD = re.compile(r"[A-Za-z]+(?:[0-9]{1,3}[A-Za-z]*)?|[0-9]{1,4}")
_CAPITALS_IN_A_ROW = re.compile(r"[A-Z]{2}")

# A reading of a text: its characters, and for each the span of the original text it was read from.
Reading = tuple[str, list[tuple[int, int]]]


@dataclass(frozen=True)
class Hidden:
    """What ``masked`` hides: ``whole``, values found whole; ``runs``, every ``RUN`` characters in a
    row of a credential's forms; ``runs_apart``, the same with what each of ``_APART`` finds left
    out (all lower-cased: found case aside)."""

    whole: re.Pattern
    runs: frozenset[str]
    runs_apart: tuple[frozenset[str], ...]


def hidden(values: Iterable[str], credentials: Iterable[str]) -> Hidden | None:
    """What to hide for ``values`` (found whole) and ``credentials`` (whole, and in their forms);
    None when there is nothing."""
    credentials = [credential for credential in credentials if credential]
    texts = {text.lower() for text in [*values, *credentials] if text}
    if not texts:
        return None
    # Longest first: a value that contains another is masked whole.
    whole = re.compile("|".join(re.escape(text) for text in sorted(texts, key=len, reverse=True)))
    forms = [form for credential in credentials for form in _forms(credential)]
    return Hidden(
        whole=whole,
        runs=frozenset(_runs(forms)),
        runs_apart=tuple(frozenset(_runs(apart.sub("", form) for form in forms)) for apart in _APART),
    )


def masked(text: str, hidden: Hidden | None) -> str:
    """``text`` with what ``hidden`` names masked, in any of its readings (the module's docstring)."""
    if not text or hidden is None:
        return text
    return _replaced(text, [span for reading in _readings(text) for span in _found(reading, hidden)])


def opaque_blanked(text: str) -> str:
    """``text`` with every run of ``OPAQUE_RUN`` characters or more of the base64, base32 and hex
    alphabets (letters, digits, ``+/=_-``) that does not read as words replaced by ``MASK``, in any
    of ``masked``'s readings: a token, a signature, an id, or a credential in a form no one foresaw.
    A text with none is kept byte for byte; a JSON body stays JSON where none was a number."""
    if not text:
        return text
    return _replaced(text, [span for reading in _readings(text) for span in _opaque_found(reading)])


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    kept, end = [], 0
    for start, stop in _merged(sorted(spans)):
        kept += [text[end:start], MASK]
        end = stop
    return "".join(kept) + text[end:] if kept else text


def _forms(credential: str) -> Iterator[str]:
    """The credential as it is and as it is encoded, lower-cased. Base64 encodes three bytes in four
    characters: inside a longer text (``user:secret``) the credential starts at any of three
    offsets, and only the characters that encode its bytes alone are its own. Base32 likewise
    encodes five bytes in eight characters."""
    raw = credential.encode()
    yield credential.lower()
    yield raw.hex()
    yield credential.encode("utf-16-be").hex()
    yield credential.encode("utf-16-le").hex()
    for encode, block, chars in (
        (base64.b64encode, 3, 4),
        (base64.urlsafe_b64encode, 3, 4),
        (base64.b32encode, 5, 8),
    ):
        for offset in range(block):
            encoded = encode(b"\0" * offset + raw).decode()
            yield (encoded[chars:] if offset else encoded).lower()


def _runs(forms: Iterable[str]) -> Iterator[str]:
    return (form[i : i + RUN] for form in forms for i in range(len(form) - RUN + 1))


def _readings(text: str) -> Iterator[Reading]:
    """``text`` as written, then after each decoding of ``_DECODINGS`` in turn that changes it, round
    after round until none does (``ROUNDS`` at most)."""
    reading = (text, [(i, i + 1) for i in range(len(text))])
    yield reading
    for _ in range(ROUNDS):
        before = reading[0]
        for escape, chars in _DECODINGS:
            decoded = _decoded(reading, escape, chars)
            if decoded[0] != reading[0]:
                reading = decoded
                yield reading
        if reading[0] == before:
            return


def _decoded(reading: Reading, escape: re.Pattern, chars) -> Reading:
    """``reading`` with each ``escape`` decoded by ``chars`` (token -> [(char, start, end)], the
    span within the token), each character keeping the span of the original it was read from."""
    text, spans = reading
    decoded, decoded_spans, end = [], [], 0
    for found in escape.finditer(text):
        decoded.append(text[end : found.start()])
        decoded_spans += spans[end : found.start()]
        for char, start, stop in chars(found.group()):
            decoded.append(char)
            decoded_spans.append((spans[found.start() + start][0], spans[found.start() + stop - 1][1]))
        end = found.end()
    decoded.append(text[end:])
    return "".join(decoded), decoded_spans + spans[end:]


def _json_chars(token: str) -> list[tuple[str, int, int]]:
    char = chr(int(token[2:], 16)) if token[1] == "u" else _JSON_CHARS[token[1]]
    return [(char, 0, len(token))]


def _byte_chars(width: int):
    """Reads a run of byte escapes ``width`` characters long each, ending in two hex digits
    (``%XX``, ``\\xXX``), as UTF-8, each character spanning its bytes (a bad byte reads as U+FFFD)."""

    def chars(token: str) -> list[tuple[str, int, int]]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        read, start = [], 0
        for index in range(0, len(token), width):
            for char in decoder.decode(bytes([int(token[index + width - 2 : index + width], 16)])):
                read.append((char, start, index + width))
                start = index + width
        return read + [(char, start, len(token)) for char in decoder.decode(b"", final=True)]

    return chars


def _entity_chars(token: str) -> list[tuple[str, int, int]]:
    """An HTML entity, read as ``html.unescape`` reads it; a name it does not know is kept as written."""
    read = html.unescape(token)
    if read == token:
        return [(char, index, index + 1) for index, char in enumerate(token)]
    return [(char, 0, len(token)) for char in read]


def _left_out(token: str) -> list[tuple[str, int, int]]:
    return []


# Each decoding: what it finds, and how it reads what it found.
_DECODINGS = (
    (_JSON_ESCAPE, _json_chars),
    (_X_ESCAPES, _byte_chars(4)),
    (_PERCENT, _byte_chars(3)),
    (_ENTITY, _entity_chars),
)


def _found(reading: Reading, hidden: Hidden) -> Iterator[tuple[int, int]]:
    """The spans of the original text where ``reading`` shows something hidden, whole or in runs,
    and in runs with what each of ``_APART`` finds left out."""
    text, spans = reading
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters lower-case to two: keep those as they are
        lowered = "".join(char if len(char.lower()) != 1 else char.lower() for char in text)
    for found in hidden.whole.finditer(lowered):
        yield spans[found.start()][0], spans[found.end() - 1][1]
    if hidden.runs:
        yield from _runs_found((lowered, spans), hidden.runs)
        for apart, runs in zip(_APART, hidden.runs_apart, strict=True):
            yield from _runs_found(_decoded((lowered, spans), apart, _left_out), runs)


def _runs_found(reading: Reading, runs: frozenset[str]) -> Iterator[tuple[int, int]]:
    text, spans = reading
    for start in range(len(text) - RUN + 1):
        if text[start : start + RUN] in runs:
            yield spans[start][0], spans[start + RUN - 1][1]


def _opaque_found(reading: Reading) -> Iterator[tuple[int, int]]:
    text, spans = reading
    for found in _OPAQUE.finditer(text):
        if not _reads_as_words(found.group()):
            yield spans[found.start()][0], spans[found.end() - 1][1]


def _reads_as_words(run: str) -> bool:
    """Whether ``run`` is words (an error code, a path, CamelCase): ``_WORD``s between ``_``, ``-``
    and ``/``, none with two capitals in a row unless all capitals and shorter than a token."""
    return all(not piece or _is_word(piece) for piece in _WORD_SEPARATORS.split(run))


def _is_word(piece: str) -> bool:
    if not _WORD.fullmatch(piece):
        return False
    return not _CAPITALS_IN_A_ROW.search(piece) or (piece.isupper() and len(piece) < OPAQUE_RUN)


def _merged(spans: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Sorted spans joined where they overlap or touch: one mask for one run."""
    current = None
    for start, stop in spans:
        if current and start <= current[1]:
            current = (current[0], max(current[1], stop))
            continue
        if current:
            yield current
        current = (start, stop)
    if current:
        yield current
