"""What may reach a terminal: text from nodes, kernels and databases is untrusted.

A GPU name, a kernel's stdout or a --trigger may carry ESC or BEL bytes that
would move the cursor, retitle the window or worse when printed raw. Every
such text is passed through `printable` before it is echoed: control
characters become visible escapes (\\x1b), newlines and tabs stay.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str, keep_newlines: bool = True) -> str:
    escaped = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return escaped if keep_newlines else escaped.replace("\n", "\\n")
