"""The one error type for input a user, an analyst or a configuration got wrong."""


class InvalidInput(ValueError):
    """Raised before anything is written; the message says what is wrong and what is allowed."""
