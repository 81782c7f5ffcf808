"""Text that names a database or a server, with its password masked: what the command line prints, what errors and
logs say. A ``postgresql://`` store URL carries its password (``NAKODO_DATABASE``), and so may any other URL a user
configures; the rest of the URL stays, so that a message still says which server and database it means."""

from __future__ import annotations

import re

MASK = "***"

# A URL from its scheme to the next space or quote: the extent libpq and the project's messages quote one in.
_URL = re.compile(r"""(?i)\b([a-z][a-z0-9+.\-]*://)([^\s"']*)""")
# libpq's `password=` in a URL's query or a key/value connection string, quoted or not.
_PASSWORD_PARAMETER = re.compile(r"""(?i)\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)""")


def _mask_user_info(url: re.Match[str]) -> str:
    scheme, rest = url.groups()
    # Up to the URL's last `@`: a password may hold an `@`, a `/` or a `?` its writer did not percent-encode. An `@`
    # further on (in a path, rarely) masks more than the password, never less.
    user_info, at, server = rest.rpartition("@")
    if not at or ":" not in user_info:
        return url.group(0)
    user = user_info.split(":", 1)[0]
    return f"{scheme}{user}:{MASK}@{server}"


def redacted_url(text: str) -> str:
    """``text`` (a URL, a connection string, or a message quoting either) with every password in it replaced by
    ``***``: ``postgresql://nakodo:***@db:5432/nakodo``. Text without a password comes back unchanged."""
    return _PASSWORD_PARAMETER.sub(rf"\g<1>{MASK}", _URL.sub(_mask_user_info, text))
