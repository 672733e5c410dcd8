"""Every form a secret may take in what the agent left (as is, reversed, ROT13, UTF-16, hex in
either case, base64, base32 and base85 at every alignment, URL-encoded), and a streamed search
and replacement of them over blocks of bytes (memory bounded by a few chunks, a match across a
chunk edge found): what the scrub (`secrets`) looks for."""

from __future__ import annotations

import base64
import codecs
import functools
import itertools
import os
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"


MIN_SECRET_LEN = 8  # shorter values ("none", "1") would redact ordinary text


def secrets_from(values: Iterable[str | None]) -> list[str]:
    return sorted({v for v in values if v and len(v) >= MIN_SECRET_LEN}, key=len, reverse=True)


def _fragments(secret: bytes, encode, group: int, bits: int) -> set[bytes]:
    """The characters of `encode`d text that depend on the secret's bytes only, wherever the
    secret starts in the encoded data: one fragment per alignment within a `group` of bytes
    (a character carries `bits` bits)."""
    found = set()
    for lead in range(group):
        encoded = encode(b"\0" * lead + secret)
        start, end = -(-8 * lead // bits), 8 * (lead + len(secret)) // bits
        fragment = encoded[start:end]
        if len(fragment) >= MIN_SECRET_LEN:
            found.add(fragment)
    return found


def _group_fragments(secret: bytes, encode, size: int, chars: int) -> set[bytes]:
    """As `_fragments`, for encodings of whole groups (base85: 4 bytes → 5 characters): the
    characters of the groups that lie wholly inside the secret, at every alignment."""
    found = set()
    for lead in range(size):
        encoded = encode(b"\0" * lead + secret + b"\0" * size)
        first = -(-lead // size)  # the first group that starts inside the secret
        last = (lead + len(secret)) // size  # groups before this one end inside it
        fragment = encoded[first * chars:last * chars]
        if len(fragment) >= MIN_SECRET_LEN:
            found.add(fragment)
    return found


def forms(secrets: list[str]) -> list[bytes]:
    """Every form looked for, longest first (a longer one may contain a shorter one)."""
    out: set[bytes] = set()
    for secret in secrets:
        raw = secret.encode()
        out |= {raw, raw[::-1], raw.hex().encode(), raw.hex().upper().encode(),
                quote(secret, safe="").encode(), quote_plus(secret, safe="").encode(),
                codecs.encode(secret, "rot13").encode(), secret.encode("utf-16-le"), secret.encode("utf-16-be")}
        for encode in (base64.b85encode, base64.a85encode):
            out |= _group_fragments(raw, encode, 4, 5)
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            out |= _fragments(raw, encode, 3, 6)
        b32 = _fragments(raw, base64.b32encode, 5, 5)
        out |= b32 | {f.lower() for f in b32}
    return sorted(out, key=len, reverse=True)




@functools.lru_cache(maxsize=8)
def _compiled(encoded: tuple[bytes, ...]) -> re.Pattern[bytes]:
    return re.compile(b"|".join(re.escape(f) for f in encoded))  # longest first: the longest form wins


def pattern_of(encoded: list[bytes]) -> re.Pattern[bytes]:
    return _compiled(tuple(encoded))


_SMALL = 1 << 16  # below this, one regex search beats a substring search per form


def _may_hold(buf: bytes, encoded: list[bytes], pattern: re.Pattern[bytes]) -> bool:
    if len(buf) < _SMALL:
        return pattern.search(buf) is not None
    return any(form in buf for form in encoded)  # C-speed scans of a large block


def replaced(blocks, encoded: list[bytes], into=None) -> tuple[bool, bool]:
    """Stream `blocks` past every form: (found a form, valid UTF-8 throughout); with `into`
    (a binary file) the text with every form replaced is written there as it goes. A block
    is searched with the regex only where a plain substring search (C speed) found a form."""
    pattern, longest = pattern_of(encoded), len(encoded[0])
    decoder = codecs.getincrementaldecoder("utf-8")()
    found, text, carry = False, True, b""
    redacted = REDACTED.encode()
    for block in itertools.chain(blocks, [None]):
        if block is not None and text:
            try:
                decoder.decode(block)
            except UnicodeDecodeError:
                text = False
        buf = carry + (block or b"")
        cut = len(buf) if block is None else max(0, len(buf) - (longest - 1))
        out, at = [], 0
        if _may_hold(buf, encoded, pattern):
            for match in pattern.finditer(buf):
                if match.start() >= cut:
                    break
                found = True
                out += [buf[at:match.start()], redacted]
                at = match.end()
        at_cut = max(at, cut)
        out.append(buf[at:at_cut])
        carry = buf[at_cut:]
        if into is not None:
            into.write(b"".join(out))
    if text:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            text = False
    return found, text


@functools.lru_cache(maxsize=4)
def forms_of(secrets: tuple[str, ...]) -> list[bytes]:
    return forms(list(secrets))


def redact_text(text: str | None, secrets: list[str]) -> str | None:
    """A message (a reason, a line for the terminal) with every form of each secret replaced."""
    if not text or not secrets:
        return text
    raw = text.encode("utf-8", "surrogateescape")
    for form in forms_of(tuple(secrets)):
        raw = raw.replace(form, REDACTED.encode())
    return raw.decode("utf-8", "surrogateescape")


def holds_text(value: str, encoded: list[bytes]) -> bool:
    raw = os.fsencode(value)
    return any(form in raw for form in encoded)
