"""`make bench`: this project's import against the naive DuckDB query and a pyarrow dataset, side by side.

A release shaped like Overture's (16 files of 256 row groups) is served from an S3-compatible server on loopback
behind a proxy that adds a per-request latency and counts requests and bytes; each read runs in a fresh process.
"""
