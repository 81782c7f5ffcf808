"""The op jobs the sensors launch: each beside the op it runs."""

import dagster as dg

# The console gets a run's warnings and errors only: every event is in the UI, and `make run`'s terminal stays
# readable. The jobs and the definitions' asset jobs (an analyst's run) use it alike.
QUIET_CONSOLE = {"console": dg.colored_console_logger.configured({"log_level": "WARNING"})}
