"""A release's files read by byte range: the one module that talks to the object store, and the pipeline that
fetches a run's row groups and decodes them as they land.

Files are read through obstore (Rust's object_store): range GETs from one event loop, a local folder through
the same calls. Each request is obstore's blocking call on a thread of ``_REQUEST_THREADS``, not its coroutine: a
coroutine ends on a thread of obstore's runtime, which then calls into Python to wake the loop, and one still doing
so as the interpreter exits aborts the process (Python ends a thread that asks for the GIL while finalizing; the
Rust frames it unwinds through cannot be unwound). Python joins its own threads before finalizing.

Not through DuckDB: DuckDB cannot read a byte range; nor pyarrow's S3 filesystem, which sends a
HEAD per file first (a round trip per file, refused where a bucket policy grants anonymous readers only
s3:GetObject, as the loopback server does). The endpoint, region and anonymous-unless-credentials rule are
``duck.s3_settings``', the one DuckDB's secret is made from, so both clients always agree; with credentials,
obstore signs the requests, without them it sends them unsigned.

Overture releases never change once published, but a folder can be rewritten under the same name: each file's
version (its ETag; a local file's, obstore's: inode, modification time and size) is in the index, every range
request is conditional on it (If-Match), and a changed or vanished file raises ``StaleIndex`` so that the caller
rebuilds the index.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import queue
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import obstore
import pyarrow as pa
import pyarrow.parquet as pq
from obstore.exceptions import NotFoundError, PreconditionError
from obstore.store import LocalStore, S3Store

from nakodo_dagster.overture import duck
from nakodo_dagster.overture.duck import is_s3, s3_settings

# Latency, not bandwidth, bounds a run over HTTP: enough requests in flight at once (each on a connection of its
# own) that a block's requests go out in a round or two. S3 serves thousands of GETs a second per prefix.
FETCH_WORKERS = 128
# Shared by every read in the process and started as needed; each waits in obstore with the GIL released.
_REQUEST_THREADS = ThreadPoolExecutor(FETCH_WORKERS, thread_name_prefix="release-request")
# Footers are decoded and files' row groups decoded on threads while the requests are out.
DECODE_WORKERS = 4
# Row groups decoded at once as their pieces land: enough that a call's own cost is small beside the decoding.
DECODE_BATCH_ROW_GROUPS = 8


T = TypeVar("T")


class StaleIndex(Exception):
    """A release file changed or vanished since the index was built: rebuild the index and read again. ``path`` is
    the file, where one is to blame."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


@dataclass
class FetchStats:
    """What a set of fetches cost: HTTP requests (None for a local folder) and bytes."""

    requests: int | None
    bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, length: int) -> None:
        """Count one read of ``length`` bytes."""
        with self._lock:
            self.bytes += length
            if self.requests is not None:
                self.requests += 1


class Objects:
    """A root's files read by byte range through obstore: a local folder, or an S3 bucket as the environment says.

    Every read is a coroutine of the caller's event loop; at most FETCH_WORKERS are in flight at once in a process.
    """

    def __init__(self, root: str) -> None:
        if is_s3(root):
            bucket = root.removeprefix("s3://").partition("/")[0]
            self.prefix = f"s3://{bucket}/"
            self.store: S3Store | LocalStore = s3_store(bucket, os.environ)
        else:
            # Local paths are absolute (check_root): the store's root is the file system's.
            self.prefix = ""
            self.store = LocalStore()
        self.stats = FetchStats(requests=0 if self.prefix else None)

    async def tail(self, path: str, length: int) -> tuple[bytes, int, str]:
        """The last ``length`` bytes of a file (all of a shorter one), its size and its version (ETag)."""
        meta, data = await self._get(path, {"range": {"suffix": length}})
        self.stats.add(len(data))
        return bytes(data), meta["size"], meta["e_tag"] or ""

    async def modified(self, path: str) -> dt.datetime | None:
        """When the file was last written (whole seconds on S3), or None if it is gone."""
        try:
            meta = await _requested(obstore.head, self.store, path.removeprefix(self.prefix))
        except (FileNotFoundError, NotFoundError):
            return None
        self.stats.add(0)
        return meta["last_modified"]

    async def files(self, folder: str, suffix: str) -> list[str]:
        """The files directly in a folder whose names end with ``suffix``, sorted, named as DuckDB's glob names them."""
        listed = await _requested(obstore.list_with_delimiter, self.store, folder.removeprefix(self.prefix) + "/")
        self.stats.add(0)
        return sorted(self.prefix + item["path"] for item in listed["objects"] if item["path"].endswith(suffix))

    async def read(self, path: str, offset: int, length: int, version: str) -> memoryview:
        """``length`` bytes at ``offset`` of the file's ``version``; StaleIndex if the file changed or is gone.

        Conditional on the version (If-Match), each request on its own: a file rewritten between two of a run's
        requests fails the second one, so a run never decodes pages of two versions of a file. This is why the
        reads are single ``get`` calls with ``if_match`` and not ``get_ranges``, which takes no condition; the
        ranges are coalesced and split by ``plan_requests`` instead.
        """
        options: dict[str, Any] = {"range": (offset, offset + length)}
        if version:
            options["if_match"] = version
        try:
            _, data = await self._get(path, options)
        except (FileNotFoundError, NotFoundError, PreconditionError) as exc:
            raise StaleIndex(f"{path} changed or is gone since the index was built: {exc}", path) from exc
        if len(data) != length:
            raise OSError(f"reading {length} bytes at {offset} of {path}: got {len(data)}")
        self.stats.add(len(data))
        return data

    async def _get(self, path: str, options: dict[str, Any]) -> tuple[Mapping[str, Any], memoryview]:
        """A GET's object metadata and body."""

        def get() -> tuple[Mapping[str, Any], memoryview]:
            result = obstore.get(self.store, path.removeprefix(self.prefix), options=options)
            return result.meta, memoryview(result.bytes())

        return await _requested(get)


async def _requested(request: Callable[..., T], *args: Any) -> T:
    """A blocking obstore call's result, awaited on the running loop while it runs on ``_REQUEST_THREADS``."""
    return await asyncio.get_running_loop().run_in_executor(_REQUEST_THREADS, request, *args)


def s3_store(bucket: str, environ: Mapping[str, str]) -> S3Store:
    """An obstore client of ``bucket`` as ``duck.s3_settings`` describes S3 access, exactly as DuckDB's secret: the
    same endpoint (path-style), region, timeout and retries; signed with the credentials when there are some,
    unsigned (anonymous, as Overture's public bucket allows) when there are none.

    Everything the rule decides is passed explicitly, since obstore also reads AWS_* variables itself and an
    explicit value wins over them. The credentials come from a provider of this rule's: without one, obstore builds
    its own chain from the variables even when it does not sign (a lone AWS_ACCESS_KEY_ID is then an error, no key
    a lookup of the instance's metadata service), and a provider takes precedence over that chain.
    """
    settings = s3_settings(environ)
    signed = "key_id" in settings
    config: dict[str, Any] = {"region": settings["region"], "skip_signature": not signed}

    def credentials() -> dict[str, Any]:
        if not signed:
            raise PermissionError("S3 access is anonymous: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set")
        keys = {"access_key_id": settings["key_id"], "secret_access_key": settings["secret"]}
        # Keys from the environment do not expire: obstore asks once.
        return keys | {"token": settings.get("session_token"), "expires_at": None}

    if "endpoint" in settings:
        scheme = "https" if settings["use_ssl"] else "http"
        config |= {"endpoint": f"{scheme}://{settings['endpoint']}", "virtual_hosted_style_request": False}
    else:
        config["virtual_hosted_style_request"] = True
    # duck's constants, read now (not at import) as connect() reads them: 5xx, dropped connections and timeouts are
    # retried with the same waits, and a request that hangs gives up after the same time.
    wait = dt.timedelta(milliseconds=duck.HTTP_RETRY_WAIT_MS)
    retries = {
        "max_retries": duck.HTTP_RETRIES,
        "backoff": {
            "init_backoff": wait,
            "base": duck.HTTP_RETRY_BACKOFF,
            "max_backoff": wait * duck.HTTP_RETRY_BACKOFF**duck.HTTP_RETRIES,
        },
        "retry_timeout": dt.timedelta(seconds=duck.HTTP_TIMEOUT_S * (duck.HTTP_RETRIES + 1)),
    }
    client = {
        "allow_http": not settings.get("use_ssl", True),
        "connect_timeout": dt.timedelta(seconds=min(10, duck.HTTP_TIMEOUT_S)),
        # Between two reads of a response, not for the whole of it: a long range on a slow link is not cut off.
        "read_timeout": dt.timedelta(seconds=duck.HTTP_TIMEOUT_S),
        "timeout": dt.timedelta(minutes=10),
    }
    return S3Store(bucket, config=config, client_options=client, retry_config=retries, credential_provider=credentials)


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to the end from synchronous code, on a thread of its own if this one runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop_running = False
    else:
        loop_running = True
    # Run outside the except clause: there, a failure of the coroutine would carry "no running event loop" as its
    # context, an unrelated error in the run's log.
    if not loop_running:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


def parse_footer(footer: bytes | pa.Buffer) -> pq.FileMetaData:
    """A Parquet footer (with the magic before it, as the index stores it) parsed."""
    return pq.read_metadata(pa.BufferReader(footer))


@dataclass(frozen=True)
class FileRead:
    """A release file a read fetches from: its path, size and version (every request is conditional on it), and its
    footer, which decodes the row groups."""

    path: str
    size: int
    version: str
    footer: bytes | pa.Buffer


@dataclass(frozen=True)
class ReadPlan:
    """What a read fetches and decodes, worked out before any request goes out (``reader.plan_read``).

    ``requests`` are (file number, offset, length) rows, a file's number a key of ``files``; ``row_groups`` the
    (file number, row group) rows they carry bytes of, and request i carries those from ``first_met[i]`` to
    ``past_met[i]``; ``columns`` says which leaves (by Parquet path) are decoded. With no row group to read,
    ``files`` holds one file still, whose footer gives the columns' types.
    """

    files: Mapping[int, FileRead]
    requests: np.ndarray
    row_groups: np.ndarray
    first_met: np.ndarray
    past_met: np.ndarray
    columns: Callable[[str], bool]


class LandingRowGroups:
    """The wanted columns of some row groups, decoded table by table in the order they land, while later requests
    are still out; iterating raises the fetch's error where it failed. ``stats`` counts what was fetched."""

    def __init__(self, source: Objects) -> None:
        self.stats = source.stats
        self._landed: queue.SimpleQueue[pa.Table | BaseException | None] = queue.SimpleQueue()

    def land(self, landed: pa.Table | BaseException | None) -> None:
        """Hand on a decoded table, the error that ended the fetch, or None once it is over."""
        self._landed.put(landed)

    def __iter__(self) -> Iterator[pa.Table]:
        while (landed := self._landed.get()) is not None:
            if isinstance(landed, BaseException):
                raise landed
            yield landed


@contextlib.contextmanager
def landing_row_groups(root: str, plan: ReadPlan) -> Iterator[LandingRowGroups]:
    """The plan's row groups, fetched by concurrent range requests on a thread of their own and decoded as they
    land (``LandingRowGroups``); leaving the block stops what is still being fetched."""
    source = Objects(root)
    landing = LandingRowGroups(source)
    stop: list[Callable[[], None]] = []
    started = threading.Event()

    async def fetch_all() -> None:
        loop = asyncio.get_running_loop()
        fetching = asyncio.ensure_future(_read_row_groups(source, plan, landing.land))
        stop.append(lambda: loop.call_soon_threadsafe(fetching.cancel))
        started.set()
        await fetching

    def serve() -> None:
        try:
            asyncio.run(fetch_all())
        # Whatever ends the fetch, the reader raises it where it iterates.
        except BaseException as error:
            landing.land(error)
        finally:
            started.set()
            landing.land(None)

    fetcher = threading.Thread(target=serve, name="row-group-fetch", daemon=True)
    fetcher.start()
    try:
        yield landing
    finally:
        started.wait()
        if stop and fetcher.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed as the fetch ended
                stop[0]()
        fetcher.join()


async def _read_row_groups(source: Objects, plan: ReadPlan, landed: Callable[[pa.Table], None]) -> None:
    row_groups, first_met, past_met = plan.row_groups, plan.first_met, plan.past_met
    # How many requests each row group still waits for: each request adds one to a run of them.
    starts_and_ends = np.zeros(len(row_groups) + 1, dtype=np.int64)
    np.add.at(starts_and_ends, first_met, 1)
    np.add.at(starts_and_ends, past_met, -1)
    pending = np.cumsum(starts_and_ends[:-1])
    unready = Counter(row_groups[:, 0].tolist())
    ready: dict[int, list[int]] = {}
    # Each file is decoded from one buffer of its full size: only the fetched pages are ever touched (the rest is
    # never committed), and Arrow reads it natively instead of through a Python file object.
    buffers: dict[int, np.ndarray] = {}

    def decode(file_number: int, groups: list[int], footer: pq.FileMetaData) -> pa.Table:
        buffer = buffers.get(file_number, np.zeros(0, dtype=np.uint8))
        reader = pq.ParquetFile(pa.BufferReader(pa.py_buffer(buffer)), metadata=footer)
        leaves = [footer.schema.column(i).path for i in range(footer.num_columns)]
        try:
            return reader.read_row_groups(groups, columns=[c for c in leaves if plan.columns(c)])
        except (OSError, pa.ArrowException) as exc:
            # Arrow decodes a buffer and does not know its file: a failure's headline must name it (faults.classify
            # reads the name from the chain; the cause still says what was wrong).
            raise OSError(f"{plan.files[file_number].path}: {exc}") from exc

    async def fetch(number: int, file_number: int, offset: int, length: int) -> tuple[int, int, int, memoryview]:
        file = plan.files[file_number]
        data = await source.read(file.path, offset, length, file.version)
        return number, file_number, offset, data

    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(DECODE_WORKERS) as pool:
        # Footers are parsed while the requests are out, not after they land (tens of milliseconds a file).
        footers = {f: loop.run_in_executor(pool, parse_footer, file.footer) for f, file in plan.files.items()}

        async def decoded(file_number: int, groups: list[int]) -> None:
            landed(await loop.run_in_executor(pool, decode, file_number, groups, await footers[file_number]))

        decodes: list[asyncio.Future[None]] = []
        fetches = [
            asyncio.ensure_future(fetch(number, *request)) for number, request in enumerate(plan.requests.tolist())
        ]
        try:
            # Row groups are decoded in batches as their last pieces land, while later requests are still out.
            for done in asyncio.as_completed(fetches):
                number, file_number, offset, data = await done
                if file_number not in buffers:
                    buffers[file_number] = np.zeros(plan.files[file_number].size, dtype=np.uint8)
                buffers[file_number][offset : offset + len(data)] = np.frombuffer(data, dtype=np.uint8)
                met = slice(first_met[number], past_met[number])
                pending[met] -= 1
                for landed_file, group in row_groups[met][pending[met] == 0].tolist():
                    ready.setdefault(landed_file, []).append(group)
                    unready[landed_file] -= 1
                batch = ready.get(file_number, [])
                if batch and (len(batch) >= DECODE_BATCH_ROW_GROUPS or not unready[file_number]):
                    groups = sorted(ready.pop(file_number))
                    decodes.append(asyncio.ensure_future(decoded(file_number, groups)))
            await asyncio.gather(*decodes)
            if not decodes:
                # No row group meets the box: the plan's one file still gives the columns' types, for an empty table.
                only = next(iter(plan.files))
                landed(decode(only, [], await footers[only]))
        finally:
            for task in (*fetches, *decodes):
                task.cancel()
