"""What may reach a terminal: text from nodes, kernels and databases is untrusted.

A GPU name, a kernel's stdout or a --trigger may carry ESC or BEL bytes that
would move the cursor, retitle the window or worse when printed raw. Every
such text is passed through `printable` before it is echoed: control
characters, bidi overrides and invisible characters become visible escapes
(\\x1b, \\u202e, \\u200b), newlines and tabs stay. The report's pages take the same
text through `printable_on_page`.
"""

from __future__ import annotations

import re

# control characters, and the bidirectional overrides and isolates: U+202E makes a reason read backwards, on a page and
# in a terminal that honours it (`farm show` printed one raw: a red-team finding)
# (and the marks U+061C, U+200E, U+200F; U+2028 and U+2029, which Python's splitlines and some
# log viewers take for a line's end: a forged line of its own)
# (and the characters drawn as nothing: zero-width spaces and joiners, U+2060-U+206F, U+FEFF,
# soft hyphens, fillers, variation selectors, tags: "NVIDIA H100" and "NVIDIA H100\u200b" headed
# two columns of one node that read alike, one green, one grey: a red-team finding)
# (and the spaces other than " ": "NVIDIA\u00a0H100" headed a column of its own that read
# "NVIDIA H100", beside the node's real one, one red, one green: red-team 210)
_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\xa0\xad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f"
    r"\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U0001d173-\U0001d17a"
    r"\U000e0000-\U000e0fff]"
)
_CONTROL_ON_PAGE = _CONTROL


# joiners and variation selectors are part of legitimate text (an emoji's "\u26a0\ufe0f", a family
# emoji's U+200D, a Devanagari or Persian word's U+200D or U+200C, a Japanese name's U+E0100): kept
# between (a joiner) or after (a selector) characters that are not ASCII, where they join or vary
# something drawn; beside ASCII (a GPU name's "H100\u200d") they are still shown (a review finding)
_JOINERS = frozenset((0x200C, 0x200D))
_SELECTORS = frozenset((*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)))


def _drawn(char: str) -> bool:
    """A character that is not ASCII, a space or one `_CONTROL` shows, selectors aside."""
    return ord(char) > 0x7F and not char.isspace() and (ord(char) in _SELECTORS or not _CONTROL.match(char))


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    text, at = match.string, match.start()
    before, after = text[at - 1 : at], text[at + 1 : at + 2]
    if code in _SELECTORS and before and _drawn(before):
        return match.group()
    if code in _JOINERS and before and after and _drawn(before) and _drawn(after):
        return match.group()
    return _escape(code)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")


def card_text(name: str) -> str:
    """A card's name as shown wherever cards are told apart (a matrix's column heads, a cell's
    title, a JUnit testcase's name): every character but printable ASCII as its escape. nvidia-smi
    names cards in ASCII, and "NVIDIA \u041d100" (a Cyrillic En) or "NVIDIA H\uff11\uff10\uff10"
    (fullwidth digits) headed a column that read "NVIDIA H100" beside the node's real card's,
    which no list of invisible characters catches (red-team 210)."""
    return _NOT_PRINTABLE_ASCII.sub(lambda m: _escape(ord(m.group())), name)


# what a CI runner takes from its log for a command of its own: GitHub Actions' `::name::` at a
# line's start (after blanks) and its older `##[name]` anywhere in a line, Azure Pipelines'
# `##vso[`. A kernel printing `::add-mask::1` (every "1" of the job's log masked after it, the
# failure counts too) or `##vso[task.complete result=Succeeded;]` reached a CI job's log through
# a quoted stderr line, `farm show` or a JUnit export to stdout (a red-team finding).
_CI_COMMAND_START = re.compile(r"^([^\S\n]*):(?=:)", re.M)
_CI_COMMAND_ANYWHERE = re.compile(r"#(?=#(?:vso)?\[)", re.I)


def ci_inert(text: str, colon: str, hash_sign: str) -> str:
    """`text` with the first character of each CI workflow command written as `colon` or
    `hash_sign` (an escape its reader decodes, or shows): no runner acts on it."""
    text = _CI_COMMAND_START.sub(lambda m: m.group(1) + colon, text)
    return _CI_COMMAND_ANYWHERE.sub(lambda _m: hash_sign, text)


def printable(text: str, keep_newlines: bool = True) -> str:
    escaped = ci_inert(_CONTROL.sub(_visible, text), "\\x3a", "\\x23")
    return escaped if keep_newlines else escaped.replace("\n", "\\n")


def printable_on_page(text: str) -> str:
    """Text for an HTML page, before it is escaped: control characters (a kernel's NUL,
    ESC, form feed) and bidi overrides become visible escapes; newlines and tabs stay."""
    return _CONTROL_ON_PAGE.sub(_visible, text) if _CONTROL_ON_PAGE.search(text) else text
