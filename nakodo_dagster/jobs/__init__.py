"""The op jobs the sensors launch: each beside the op it runs."""

# A sensor's run prints what it did and what went wrong (INFO and up), not its every event at DEBUG: each event is
# in the UI anyway, and `make run`'s terminal stays readable. The instance still records every event.
CONSOLE_LOGGER_CONFIG = {"console": {"config": {"log_level": "INFO"}}}
