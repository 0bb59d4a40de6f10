"""The password in a PostgreSQL URL or conninfo, found in one place so that no message or log line shows it.

Both the store URL helpers (``redacted``) and the PostgreSQL store (libpq's messages about a conninfo it
refused, which quote the offending token verbatim) mask it. No libpq parser is used: the text to search
is often the very conninfo libpq could not parse.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"

_URL_PASSWORD = re.compile(r"(password=)([^&\s]*)", re.IGNORECASE)  # a URL's ``?password=...``
# a keyword/value conninfo's ``password=...``, whose value may be single-quoted with backslash escapes
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)", re.IGNORECASE)
_ESCAPED = re.compile(r"\\(.)")


def _userinfo_password(url: str) -> tuple[int, int] | None:
    """Where the password of ``scheme://user:password@host...`` lies in ``url``, or None.

    The password starts after the first ``:`` of the credentials, and runs to the last ``@`` before the path or
    before the query, whichever lies further: a password written with an unencoded ``@``, or with a ``/`` or a
    ``?`` (libpq then reads part of it as the host, the path or the query), is masked whole. A ``@`` in the
    database name masks the host too: too much, never too little. One holding both a ``/`` and a ``?`` before
    its ``@`` is beyond this reading, as it is beyond libpq's: percent-encode it.
    """
    scheme_end = url.find("://")
    if scheme_end < 0:
        return None
    start = scheme_end + 3
    ends = [url.find(mark, start) for mark in "/?"]
    at = max(url.rfind("@", start, len(url) if end < 0 else end) for end in ends)
    if at < 0:
        return None
    colon = url.find(":", start, at)
    return None if colon < 0 else (colon + 1, at)


def redacted(url: str) -> str:
    """``url`` fit for a message or a log: a password in it (``user:secret@``, ``password=``) shown as ``***``."""
    span = _userinfo_password(url)
    if span is not None:
        url = f"{url[: span[0]]}{MASK}{url[span[1] :]}"
    return _URL_PASSWORD.sub(rf"\g<1>{MASK}", url)


def passwords(conninfo: str) -> frozenset[str]:
    """Every form of a password in ``conninfo`` a message may quote: as written, percent-decoded, unquoted."""
    found: set[str] = set()
    span = _userinfo_password(conninfo)
    if span is not None:
        whole = conninfo[span[0] : span[1]]
        # libpq quotes the part after an unencoded @ as the start of a host ("ss@db.example"): masked with its
        # @, so a short piece cannot stand for every such letter in the message
        found |= {whole, *(f"{piece}@" for piece in whole.split("@")[1:])}
    is_url = "://" in conninfo  # as libpq tells the two forms apart
    for match in (_URL_PASSWORD if is_url else _KEYWORD_PASSWORD).finditer(conninfo):
        token = match.group(2)
        found.add(token)
        if token.startswith("'"):
            found.add(_ESCAPED.sub(r"\1", token[1:].removesuffix("'")))
    found |= {unquote(password) for password in found}
    return frozenset(password for password in found if password)


def masked(text: str, conninfo: str) -> str:
    """``text`` (libpq's message about ``conninfo``, say) with every form of the conninfo's password as ``***``."""
    for password in sorted(passwords(conninfo), key=len, reverse=True):
        text = text.replace(password, MASK)
    return text
