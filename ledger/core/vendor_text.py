"""What a destination said, masked before any row keeps it: ``masked`` is the one function every
path that stores a destination's text goes through (``ledger.core.privacy.scrub_failure`` for an
answer and its message, ``scrubbed_text`` for a lookup's reason, ``secrets_masked`` for an audit
run's error).

A destination may quote what it was sent: a customer's id, and sometimes the credential itself,
written another way. So ``masked`` reads the text four ways: as written, with JSON's string escapes
decoded (``\\u0073``, ``\\/``), percent-decoded (``%2F``), and both. In each reading it finds

- each hidden value where it appears whole, case aside (an action's sensitive values, a credential);
- each run of ``RUN`` characters or more of one of a credential's forms (as it is, its hex, and its
  base64 and base64url at the three alignments it may take inside a longer encoding, which covers
  ``Basic base64(user:secret)``), so a truncated echo is caught; a ``Bearer`` or percent-encoded
  one is caught as it is or decoded;

and replaces the characters of the text they were read from with ``MASK``. Everything else is kept
as it came: a JSON body stays JSON (a masked run takes whole escape sequences, inside a string),
and a text with nothing hidden in it is kept byte for byte. Pure: no database, no settings.
"""

import base64
import codecs
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MASK = "••••"
# A run of a credential's form this long is masked wherever it appears; a shorter one is kept (a
# key's common prefix, a vendor's "ends in 4242"), or every short word could be masked.
RUN = 8

_JSON_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')
_JSON_CHARS = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_PERCENT = re.compile(r"(?:%[0-9a-fA-F]{2})+")

# A reading of a text: its characters, and for each the span of the original text it was read from.
Reading = tuple[str, list[tuple[int, int]]]


@dataclass(frozen=True)
class Hidden:
    """What ``masked`` hides: ``whole``, values found whole; ``runs``, every ``RUN`` characters in a
    row of a credential's forms (both lower-cased: found case aside)."""

    whole: re.Pattern
    runs: frozenset[str]


def hidden(values: Iterable[str], credentials: Iterable[str]) -> Hidden | None:
    """What to hide for ``values`` (found whole) and ``credentials`` (whole, and in their forms);
    None when there is nothing."""
    credentials = [credential for credential in credentials if credential]
    texts = {text.lower() for text in [*values, *credentials] if text}
    if not texts:
        return None
    # Longest first: a value that contains another is masked whole.
    whole = re.compile("|".join(re.escape(text) for text in sorted(texts, key=len, reverse=True)))
    runs = frozenset(
        form[i : i + RUN] for credential in credentials for form in _forms(credential) for i in _starts(form)
    )
    return Hidden(whole=whole, runs=runs)


def masked(text: str, hidden: Hidden | None) -> str:
    """``text`` with what ``hidden`` names masked, in any of its readings (the module's docstring)."""
    if not text or hidden is None:
        return text
    spans = sorted(span for reading in _readings(text) for span in _found(reading, hidden))
    kept, end = [], 0
    for start, stop in _merged(spans):
        kept += [text[end:start], MASK]
        end = stop
    return "".join(kept) + text[end:] if kept else text


def _forms(credential: str) -> Iterator[str]:
    """The credential as it is and as it is encoded, lower-cased. Base64 encodes three bytes in four
    characters: inside a longer text (``user:secret``) the credential starts at any of three
    offsets, and only the characters that encode its bytes alone are its own."""
    raw = credential.encode()
    yield credential.lower()
    yield raw.hex()
    for offset in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * offset + raw).decode()
            yield (encoded[4:] if offset else encoded).lower()


def _starts(form: str) -> range:
    return range(len(form) - RUN + 1)


def _readings(text: str) -> Iterator[Reading]:
    written = (text, [(i, i + 1) for i in range(len(text))])
    unescaped = _decoded(written, _JSON_ESCAPE, _json_chars)
    yield written
    for reading in (
        unescaped,
        _decoded(written, _PERCENT, _percent_chars),
        _decoded(unescaped, _PERCENT, _percent_chars),
    ):
        if reading[0] != text:
            yield reading


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


def _percent_chars(token: str) -> list[tuple[str, int, int]]:
    """A run of ``%XX`` read as UTF-8, each character spanning its bytes (a bad byte reads as U+FFFD)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    chars, start = [], 0
    for index in range(0, len(token), 3):
        for char in decoder.decode(bytes([int(token[index + 1 : index + 3], 16)])):
            chars.append((char, start, index + 3))
            start = index + 3
    chars += [(char, start, len(token)) for char in decoder.decode(b"", final=True)]
    return chars


def _found(reading: Reading, hidden: Hidden) -> Iterator[tuple[int, int]]:
    """The spans of the original text where ``reading`` shows something hidden."""
    text, spans = reading
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters lower-case to two: keep those as they are
        lowered = "".join(char if len(char.lower()) != 1 else char.lower() for char in text)
    for found in hidden.whole.finditer(lowered):
        yield spans[found.start()][0], spans[found.end() - 1][1]
    if hidden.runs:
        for start in range(len(lowered) - RUN + 1):
            if lowered[start : start + RUN] in hidden.runs:
                yield spans[start][0], spans[start + RUN - 1][1]


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
