"""The machinery under kimicount.hub: one deadline for a whole Hub operation, and huggingface_hub's HTTP
client watched while it works for one.

huggingface_hub's timeouts bound each read (HF_HUB_DOWNLOAD_TIMEOUT, HF_HUB_ETAG_TIMEOUT: 10 s; 60 s
when it retries a HEAD), not the operation: a server that trickles a byte a second never trips them, and
a 500 costs five retries over 23 s. So an operation runs in daemon threads that the caller waits for at
most the deadline (`run`; Ctrl-C ends the wait at once, whatever the threads are doing), and every
request they send goes through `Watched`, a wrapper of the transports of huggingface_hub's own client:

- a request is bounded by its progress, as curl's --speed-limit and --speed-time bound one: no byte in
  `speed_time` seconds (its timeouts), or fewer than `speed_limit` bytes a second over any
  `speed_time` seconds of its body (`Stalled`), and it has failed; its timeouts are also cut to the
  time left, and its body stops at the deadline;
- a request is tried `tries` times in all, whoever retries it (huggingface_hub, or kimicount.hub,
  which retries what huggingface_hub does not: `retried`): each retry is said (`HubOptions.note`), and
  the failure of the last try is `GaveUp`, which says what failed and after how many tries, and which
  nothing retries;
- a connection that cannot be made (refused, no route to the host, a name that does not resolve) fails
  at once, where huggingface_hub would retry it for 23 s to the same end;
- an answer is refused as it arrives when huggingface_hub would build a path in its cache from a header
  that is not a plain token (`../../escape` as a commit or ETag), or when its body is over the size the
  caller can take (`capped`).

Nothing here knows the Hub's protocol; kimicount.hub does.
"""

from __future__ import annotations

import errno
import functools
import queue
import re
import sys
import threading
import time
import typing
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import islice
from types import ModuleType
from typing import Any, TypeVar

from huggingface_hub import constants
from huggingface_hub.utils import _http, get_session, set_client_factory

from kimicount.errors import UnreachableError
from kimicount.options import HubOptions
from kimicount.reading import shorten

T = TypeVar("T")

#: Parallel requests of one operation, as huggingface_hub's own thread map makes them.
MAX_WORKERS = 8


def _http_library() -> ModuleType:
    """The HTTP library huggingface_hub talks through: httpx, or its successor httpx2 (huggingface_hub
    2.x). Both may be installed, and only the one it uses raises the errors to catch and has the
    transport class to wrap: read off the client class its `get_session` is declared to return, without
    making a client.

    >>> _http_library().__name__ in ("httpx", "httpx2")
    True
    """
    client_class = typing.get_type_hints(get_session)["return"]
    return sys.modules[client_class.__module__.partition(".")[0]]


if typing.TYPE_CHECKING:  # the types: huggingface_hub 2.x's httpx2 (untyped here, so Any)
    import httpx2 as httpx
else:
    httpx = _http_library()


class OutOfTime(Exception):
    """The operation's deadline has passed (raised in the threads that do its requests)."""


class Unreachable(Exception):
    """No connection could be made to the Hub: refused, no route, or a host name that does not resolve.
    Not an httpx error, so that huggingface_hub passes it through instead of retrying it."""


class GaveUp(Exception):
    """A request failed on each of its tries ("GET URL: what failed; gave up after 3 tries"). Not an
    httpx error: huggingface_hub passes it through instead of retrying it."""


class Refused(Exception):
    """An answer refused as it arrived (a header that would name a path outside the Hub cache, a body
    over what the caller takes). Not an httpx error either: huggingface_hub does not retry it."""


#: True once an operation's threads were left running: its deadline passed, Ctrl-C ended the wait, or
#: one of them failed while others still worked. The CLI then ends the process at once (kimicount.cli.exits).
abandoned = False


class Operation:
    """One Hub operation: when it must end, what it is doing (for the status line and the timeout
    message), the requests that failed (a request sent again after it failed is a retry), and its
    threads at work."""

    def __init__(self, options: HubOptions, where: str):
        self.options = options
        self.where = where
        self.deadline = time.monotonic() + options.timeout
        self.doing = "starting"
        self.last_failure: str | None = None
        self.working = 0  # threads started and not yet done
        self._failures: Counter[tuple[str, str]] = Counter()
        self._reasons: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def status(self, text: str) -> None:
        self.doing = text
        self.options.status(text)

    def check(self) -> None:
        if time.monotonic() >= self.deadline:
            raise OutOfTime(self.where)

    def sending(self, request: Any) -> None:
        """Before each request: stop if the time is up, bound its timeouts by `speed_time` and the time
        left, and say so when it repeats one that failed (a retry)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime(self.where)
        bound = min(self.options.speed_time, left)
        timeouts = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {
            kind: min(timeouts.get(kind) or bound, bound) for kind in ("connect", "read", "write", "pool")
        }
        key = _key(request)
        with self._lock:
            failed, reason = self._failures[key], self._reasons.get(key)
        if failed and reason:
            self.options.note(f"{key[0]} {key[1]}: {reason}; try {failed + 1} of {self.options.tries}")

    def failed(self, request: Any, reason: str) -> None:
        """A try of `request` failed for `reason`; GaveUp when it was the last one."""
        key = _key(request)
        with self._lock:
            self._failures[key] += 1
            self._reasons[key] = reason
            self.last_failure = reason
            tries = self._failures[key]
        if tries >= self.options.tries:
            raise GaveUp(f"{key[0]} {key[1]}: {reason}; gave up after {_tries(tries)}")

    def back_off(self, request: Any) -> None:
        """Wait before the next try of `request`: 1 s after its first failure, 2 s after its second, …
        (huggingface_hub's back-off), never past the deadline."""
        with self._lock:
            failed = self._failures[_key(request)]
        time.sleep(min(2.0 ** max(failed - 1, 0), 8.0, max(0.0, self.deadline - time.monotonic())))
        self.check()

    def out_of_time(self) -> UnreachableError:
        last = f" (last failure: {self.last_failure})" if self.last_failure else ""
        return UnreachableError(
            f"{self.where}: gave up after {self.options.timeout:g} s (--timeout, KIMICOUNT_TIMEOUT) while "
            f"{self.doing}{last}"
        )

    def started(self) -> None:
        with self._lock:
            self.working += 1

    def ended(self) -> None:
        with self._lock:
            self.working -= 1


def _tries(count: int) -> str:
    return "1 try" if count == 1 else f"{count} tries"


def _key(request: Any) -> tuple[str, str]:
    """What a retry repeats: the method and URL (huggingface_hub resumes a download with another Range)."""
    return request.method, str(request.url)


# --- threads: each passes what its work returned or raised through a queue ----------------------------

#: The operation each of our threads works for, and the body limit of its requests; Watched reads them.
_thread = threading.local()

_Outcome = tuple[bool, Any]  # (True, what the work returned) or (False, what it raised)


def _start(operation: Operation, work: Callable[[], Any], outcomes: queue.Queue[_Outcome]) -> None:
    """`work` in a daemon thread of the operation (never joined at exit, so neither a deadline nor Ctrl-C
    waits for a request that hangs); its outcome goes onto `outcomes`."""

    def target() -> None:
        _thread.operation = operation
        try:
            outcome = (True, work())
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread, which raises it
            outcome = (False, error)
        finally:
            operation.ended()
        outcomes.put(outcome)

    operation.started()
    threading.Thread(target=target, name="kimicount-hub", daemon=True).start()


def _value(outcome: _Outcome) -> Any:
    ok, value = outcome
    if ok:
        return value
    raise value


def run(options: HubOptions, where: str, work: Callable[[Operation], T]) -> T:
    """work(operation), waited for at most the deadline; the deadline passed is one SourceError."""
    global abandoned
    watch_requests()
    operation = Operation(options, where)
    outcomes: queue.Queue[_Outcome] = queue.Queue()
    _start(operation, lambda: work(operation), outcomes)
    try:
        # The wait is interruptible: Ctrl-C raises KeyboardInterrupt here at once.
        ok, value = outcomes.get(timeout=min(options.timeout, threading.TIMEOUT_MAX))
    except queue.Empty:
        abandoned = True
        raise operation.out_of_time() from None
    except KeyboardInterrupt:
        abandoned = True
        raise
    if ok:
        return value
    abandoned = abandoned or operation.working > 0
    if isinstance(value, OutOfTime):
        raise operation.out_of_time() from None
    raise value


def in_background(operation: Operation, work: Callable[[], T]) -> Callable[[], T]:
    """Start `work` in a thread of the operation; returns the function that waits for its result."""
    outcomes: queue.Queue[_Outcome] = queue.Queue()
    _start(operation, work, outcomes)
    return lambda: _value(outcomes.get())


def map_parallel(operation: Operation, work: Callable[[str], T], items: list[str]) -> Iterator[T]:
    """work(item) for every item, MAX_WORKERS at a time, each in a thread of the operation; results as
    they come. The first error is raised, and no item is started after it."""
    outcomes: queue.Queue[_Outcome] = queue.Queue()
    todo = iter(items)

    def start(count: int) -> int:
        started = 0
        for item in islice(todo, count):
            _start(operation, functools.partial(work, item), outcomes)
            started += 1
        return started

    waiting = start(MAX_WORKERS)
    while waiting:
        value = _value(outcomes.get())
        waiting += start(1) - 1
        yield value


#: The failures of a try that are worth another: no answer in time, a connection dropped or refused
#: on the way, an answer cut short (huggingface_hub's _DEFAULT_RETRY_ON_EXCEPTIONS).
TRANSIENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def retried(
    operation: Operation,
    method: str,
    url: str,
    work: Callable[[], T],
    transient: Callable[[BaseException], bool],
) -> T:
    """work(), tried again while it fails with an error `transient` says is worth another try, after
    the back-off, until Watched ends the last try of the request (`method`, `url`) as GaveUp; at most
    `tries` times here too, should Watched not be counting (a huggingface_hub without the factory)."""
    key = Sent(method, url)
    for attempt in range(1, operation.options.tries + 1):
        try:
            return work()
        except Exception as error:
            if attempt == operation.options.tries or not transient(error):
                raise
        operation.back_off(key)
    raise AssertionError("unreachable: the last try returns or raises")


class Sent:
    """A request as Operation keys it: its method and URL."""

    def __init__(self, method: str, url: str):
        self.method, self.url = method, httpx.URL(url)


@contextmanager
def capped(limit: int, what: str) -> Iterator[None]:
    """The requests this thread sends meanwhile take at most `limit` bytes of body: one said larger is
    refused before it is read, and one that runs past it is cut off there (a config.json of 300 MB is
    not downloaded into the cache first). `what` names the file in the error."""
    _thread.body_limit = (limit, what)
    try:
        yield
    finally:
        _thread.body_limit = None


# --- the transport -----------------------------------------------------------------------------------

#: The headers huggingface_hub builds paths in its cache from: the commit (snapshots/<commit>/, and
#: .no_exist/<commit>/ after a 404) on any answer; the ETag (blobs/<etag>) of the HEAD that asks for a
#: file's metadata, or the X-Linked-Etag that stands for it on a redirect. The Hub sends 40-hex commits
#: and quoted ETags (the 64-hex sha256 of an LFS file, the 40-hex git hash of another), weak ones as W/"…".
COMMIT = re.compile(r"[0-9a-f]{40}")
ETAG = re.compile(r'(W/)?"?([A-Za-z0-9_-]{1,200})"?')


def _refuse_paths(request: Any, response: Any) -> None:
    """Refused, when a header huggingface_hub makes a path in its cache of is not what the Hub sends: a
    commit that is not 40 hex digits, an ETag that is not a plain token (`../../escape` would name a
    file outside the cache)."""
    checks = [(constants.HUGGINGFACE_HEADER_X_REPO_COMMIT, COMMIT, "a commit hash (40 hex digits)")]
    etags = [constants.HUGGINGFACE_HEADER_X_LINKED_ETAG] + (["ETag"] if request.method == "HEAD" else [])
    checks += [(name, ETAG, "an ETag (letters, digits, '-' and '_', quoted)") for name in etags]
    for name, form, expected in checks:
        value = response.headers.get(name)
        if value is not None and not form.fullmatch(value.strip()):
            raise Refused(
                f"the server's {name} {shorten(value, 80)!r} is not {expected}; huggingface_hub would "
                "make a path in its cache of it"
            )


def _refuse_size(request: Any, response: Any, limit: int, what: str) -> int:
    """Refused, when the answer says its body is over `limit` bytes; returns where the body starts in
    the file (a download resumed with Range: bytes=N- starts at N)."""
    start = re.fullmatch(r"bytes=([0-9]{1,20})-", request.headers.get("Range", ""))
    offset = int(start[1]) if start and response.status_code == 206 else 0
    stated = [(0, response.headers.get(constants.HUGGINGFACE_HEADER_X_LINKED_SIZE, ""))]  # the file's size
    if not response.is_redirect:
        stated.append((offset, response.headers.get("Content-Length", "")))  # the body's, from `offset`
    for before, value in stated:
        if re.fullmatch(r"[0-9]{1,20}", value.strip()) and before + int(value) > limit:
            raise Refused(f"{before + int(value):,} bytes, more than any {what} ({limit:,} at most)")
    return offset


class Stalled(httpx.ReadTimeout):
    """A body that moves too slowly (Watched): an httpx timeout, so that it is retried as one."""


#: The statuses huggingface_hub retries (utils/_http.py, _DEFAULT_RETRY_ON_STATUS_CODES): a try failed.
RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class Watched(httpx.BaseTransport):
    """huggingface_hub's transport, with the operation's rules (see the module's docstring)."""

    def __init__(self, inner: Any):
        self._inner = inner

    def handle_request(self, request: Any) -> Any:
        operation: Operation | None = getattr(_thread, "operation", None)
        if operation is None:  # not one of ours
            return self._inner.handle_request(request)
        operation.sending(request)
        try:
            response = self._inner.handle_request(request)
        except httpx.ConnectError as error:
            reason = _cannot_connect(error)
            if reason:
                raise Unreachable(reason) from error
            _failed(operation, request, error)
            raise
        except httpx.TransportError as error:  # a timeout, a dropped connection: a try that failed
            _failed(operation, request, error)
            raise
        if response.status_code >= 500 or response.status_code in RETRIED_STATUSES:
            try:
                operation.failed(request, f"HTTP {response.status_code} {response.reason_phrase}".strip())
            except GaveUp:
                response.close()
                raise
        try:
            _refuse_paths(request, response)
            limit, what = getattr(_thread, "body_limit", None) or (None, "")
            received = 0 if limit is None else _refuse_size(request, response, limit, what)
        except Refused:
            response.close()
            raise
        response.stream = _Progressing(response.stream, operation, request, received, limit, what)
        return response

    def close(self) -> None:
        self._inner.close()


def _failed(operation: Operation, request: Any, error: BaseException) -> None:
    """Record a try that failed with `error` (GaveUp, from it, when it was the last)."""
    if isinstance(error, Stalled):
        reason = f"too slow: {error}"
    elif isinstance(error, httpx.TimeoutException):
        reason = f"no byte in {operation.options.speed_time:g} s ({type(error).__name__})"
    else:
        reason = f"{type(error).__name__}: {first_line(error)}"
    try:
        operation.failed(request, reason)
    except GaveUp as gave_up:
        raise gave_up from error


class _Progressing(httpx.SyncByteStream):
    """A response body that must keep moving: fewer than `speed_limit` bytes a second over any
    `speed_time` seconds fails it (Stalled), as a silent one fails by its read timeout; it stops at the
    deadline, and past `limit` bytes of the file when there is one."""

    def __init__(
        self, inner: Any, operation: Operation, request: Any, received: int, limit: int | None, what: str
    ):
        self._inner = inner
        self._operation = operation
        self._request = request
        self._received = received
        self._limit = limit
        self._what = what

    def __iter__(self) -> Iterator[bytes]:
        options = self._operation.options
        since, moved = time.monotonic(), 0
        chunks = iter(self._inner)
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except httpx.TransportError as error:  # no byte in speed_time, the connection dropped
                _failed(self._operation, self._request, error)
                raise
            self._operation.check()
            self._received += len(chunk)
            if self._limit is not None and self._received > self._limit:
                raise Refused(f"more than {self._limit:,} bytes, more than any {self._what}")
            moved += len(chunk)
            elapsed = time.monotonic() - since
            if elapsed >= options.speed_time:
                if moved < options.speed_limit * elapsed:
                    slow = Stalled(
                        f"{moved:,} bytes in {elapsed:.0f} s, under {options.speed_limit:,} bytes/s "
                        f"for {options.speed_time:g} s"
                    )
                    _failed(self._operation, self._request, slow)
                    raise slow
                since, moved = time.monotonic(), 0
            yield chunk

    def close(self) -> None:
        self._inner.close()


def _cannot_connect(error: BaseException) -> str | None:
    """'connection refused', 'no route to host', 'cannot resolve the host name', or None (a timeout,
    or anything else worth the retries)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, OSError) and seen.errno in _UNROUTABLE:
            return seen.strerror.lower() if seen.strerror else "no route to the host"
        if type(seen).__name__ == "gaierror":  # socket.gaierror: the host name does not resolve
            return f"cannot resolve the host name ({getattr(seen, 'strerror', None) or seen})"
        seen = seen.__cause__ or seen.__context__
    return None


_UNROUTABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH}


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return shorten(text.splitlines()[0]) if text else type(error).__name__


def watch_requests() -> None:
    """huggingface_hub's HTTP client, as the factory that is set builds it (its own default, or a
    library user's set_client_factory: hooks, redirects, proxies, certificates), with the transports it
    mounts wrapped in Watched. Checked at every operation, so that a factory set since is wrapped too.

    It relies on one private attribute of huggingface_hub (the factory that is set; hence the pin below
    3 in pyproject.toml) and two of httpx (a client's transports); tests/test_hostile.py
    (test_5_the_cap_holds_on_a_client_factory_the_library_user_set) checks that the wrapping takes hold
    on a factory a library user set."""
    current = getattr(_http, "_GLOBAL_CLIENT_FACTORY", None)
    if current is None or getattr(current, "kimicount_watched", False):
        return  # another huggingface_hub (the deadline still holds, through run), or wrapped already

    def factory() -> Any:
        client = current()
        if isinstance(getattr(client, "_transport", None), httpx.BaseTransport):
            client._transport = Watched(client._transport)
        mounts = getattr(client, "_mounts", None)
        if isinstance(mounts, dict):
            client._mounts = {pattern: Watched(t) if t is not None else None for pattern, t in mounts.items()}
        return client

    factory.kimicount_watched = True  # type: ignore[attr-defined]
    set_client_factory(factory)
