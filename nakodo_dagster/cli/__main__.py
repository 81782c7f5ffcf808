"""``python -m nakodo_dagster.cli``: the ``nakodo`` command line without its console script."""

from nakodo_dagster.cli import main

main()
