"""Counts in words, with the plural form right: "1 campaign", "2 campaigns"."""


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``count`` and the noun that agrees with it; ``plural_form`` for a noun that does not just take an s."""
    noun = singular if count == 1 else (plural_form or f"{singular}s")
    return f"{count:,} {noun}"
