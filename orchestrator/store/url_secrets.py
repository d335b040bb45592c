"""A database URL's secrets, and the URL with them masked, for every message that names it.

A password hides in more places than `user:password@`: any query parameter named like one
(`password`, `sslpassword`, its name percent-encoded too: SQLAlchemy decodes names before
the driver sees them), and a libpq conninfo string in a value (`dbname='host=x
password=secret'`, or the database path itself, which libpq expands the same way) or a
whole URI there (`dbname=postgresql://u:secret@h/db`). Each is read decoded, as the
driver reads it, and a part that holds one is shown as *** whole: the farm never
re-spells the rest of the URL (a SQLite path reads as the user wrote it).
"""

from __future__ import annotations

import re
from urllib.parse import unquote, unquote_plus

MASK = "***"
# a key that names a secret: libpq's password and sslpassword, and kin (passfile is only a
# path, but masking it costs a message nothing)
_SECRET_KEY = re.compile(r"pass|secret", re.IGNORECASE)
# libpq's keyword = value: a value single-quoted (backslash escapes) or a run of non-blanks
_CONNINFO = re.compile(r"([A-Za-z_]\w*)\s*=\s*('(?:[^'\\]|\\.)*'?|(?:[^\s'\\]|\\.)+)", re.DOTALL)
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)
_SCHEME = re.compile(r"^(.*?//)(.*)$", re.DOTALL)  # lenient: a URL the driver cannot parse holds secrets too
_DEPTH = 4  # nested URIs and conninfo strings deeper than this are masked whole, not read


def _value(raw: str) -> str:
    if raw.startswith("'"):
        raw = raw[1:-1] if raw.endswith("'") and len(raw) > 1 else raw[1:]
    return _UNESCAPE.sub(r"\1", raw)


def _in_text(text: str, depth: int) -> list[str]:
    """The secrets of a decoded value: a conninfo string's password values, a URI's secrets."""
    if depth > _DEPTH:
        return [text] if _SECRET_KEY.search(text) else []
    found: list[str] = []
    if "://" in text and text.lstrip()[:1] != "'":
        found += url_secrets(text.strip(), depth + 1)
    for match in _CONNINFO.finditer(text):
        value = _value(match.group(2))
        if _SECRET_KEY.search(match.group(1)):
            found += [value, match.group(2)] if value else []
        elif "=" in value or "://" in value:
            found += _in_text(value, depth + 1)
    return found


def _parts(url: str) -> tuple[str, str, str, str, str]:
    """scheme//, user info (to its @, or ""), host, path (from its /), query (from its ?)."""
    scheme = _SCHEME.match(url)
    if scheme is None:
        return "", "", "", "", ""
    head, rest = scheme.groups()
    userinfo = ""
    if "@" in rest:  # the last @: a password may hold @ itself; a masked part shows less, never more
        userinfo, rest = rest.rsplit("@", 1)
        userinfo += "@"
    host, slash, path = rest.partition("/")
    if not slash:
        host, mark, query = host.partition("?")
        return head, userinfo, host, "", mark + query
    path, mark, query = path.partition("?")
    return head, userinfo, host, "/" + path, mark + query


def _param_secrets(name: str, value: str, depth: int) -> list[str]:
    decoded = unquote_plus(value)
    if _SECRET_KEY.search(unquote_plus(name)):
        return [v for v in {value, decoded} if v]
    return [v for v in _in_text(decoded, depth) if v]


def url_secrets(url: str, depth: int = 0) -> list[str]:
    """Every secret the URL holds, as written and decoded (a driver's message may echo either)."""
    head, userinfo, _host, path, query = _parts(url)
    found: list[str] = []
    if ":" in userinfo:
        password = userinfo[:-1].split(":", 1)[1]
        found += [password, unquote(password)]
    found += _in_text(unquote(path[1:]), depth)
    for param in query[1:].split("&"):
        name, equals, value = param.partition("=")
        if equals:
            found += _param_secrets(name, value, depth)
    if userinfo and "?" in userinfo:  # the last @ was a nested URI's: read the query from the first ?
        for param in url.split("?", 1)[1].split("&"):
            name, equals, value = param.partition("=")
            found += _param_secrets(name, value, depth) if equals else []
    if not head:  # no URL at all (a conninfo string): read it as one
        found += _in_text(url, depth)
    return [secret for secret in dict.fromkeys(found) if secret]


def redact_url(url: str) -> str:
    """The URL with every secret's part shown as ***: never echo a password."""
    head, userinfo, host, path, query = _parts(url)
    if not head:
        return MASK if url_secrets(url) else url
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":" + MASK + "@"
    if path and _in_text(unquote(path[1:]), 0):
        path = "/" + MASK
    params = []
    for param in query[1:].split("&") if query else []:
        name, equals, value = param.partition("=")
        params.append(f"{name}={MASK}" if equals and _param_secrets(name, value, 0) else param)
    return f"{head}{userinfo}{host}{path}{'?' + '&'.join(params) if query else ''}"
