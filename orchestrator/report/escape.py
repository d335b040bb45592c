"""Text for the site's pages made in Python rather than templates (cell pages, the
cells of grids, for speed): escaped exactly as Jinja2's autoescape or MarkupSafe
would print it, so a page's bytes do not depend on which made it, and stored
text never choosing a file name. Everything nodes and kernels printed is untrusted.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime
from html import escape
from typing import Any

from markupsafe import escape as markup_escape

from orchestrator.terminal import printable_on_page


@functools.lru_cache(maxsize=4096)
def page_name(text: str) -> str:
    """A file name for a node or kernel page: names were validated at load, but a
    database is input too, so never let stored text choose a path."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".") or "_"
    return safe[:80]


@functools.lru_cache(maxsize=4096)
def when(moment: datetime | None) -> str:
    # cached: a run's start is printed on each of its thousands of cell pages
    return moment.strftime("%Y-%m-%d %H:%M") if moment else "–"


def decoded_text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


_SPECIAL = re.compile(r"[&<>\"']")


def e(value: Any) -> str:
    """Text for HTML, as Jinja2's autoescape prints it: str() of it, & < > " ' escaped
    (looked for first: most values have none, and one search is cheaper than five replaces)."""
    kind = type(value)
    if kind is str:
        text = value
    elif kind is int or kind is float:
        return str(value)  # digits, ".", "-", "e", "inf", "nan": nothing to escape
    else:
        text = str(value)
    text = printable_on_page(text)
    return escape(text) if _SPECIAL.search(text) else text


_e_cached = functools.lru_cache(maxsize=16384)(e)


def ew(value: Any) -> str:
    """e() of a value that repeats from page to page (names, outcomes, digests, stage
    words), remembered: a run's pages print a few thousand distinct ones 10^5 times."""
    try:
        return _e_cached(value)
    except TypeError:  # unhashable (a stored JSON value of an unexpected shape)
        return e(value)


def t(value: Any) -> str:
    """Text for HTML as the templates print it (MarkupSafe: ' as &#39;, " as &#34;),
    for the parts of template pages made here, so that their bytes stay the same."""
    kind = type(value)
    if kind is str:
        text = value
    elif kind is int or kind is float:
        return str(value)
    else:
        text = str(value)
    text = printable_on_page(text)
    return str(markup_escape(text)) if _SPECIAL.search(text) else text
