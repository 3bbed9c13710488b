"""The machinery under kimicount.hub: one deadline for a whole Hub operation, and huggingface_hub's HTTP
client watched while it works for one.

huggingface_hub's timeouts bound each read (HF_HUB_DOWNLOAD_TIMEOUT, HF_HUB_ETAG_TIMEOUT: 10 s; 60 s
when it retries a HEAD), not the operation: a server that trickles a byte a second never trips them, and
a 500 costs five retries over 23 s. So an operation runs in daemon threads that the caller waits for at
most the deadline (`run`; Ctrl-C ends the wait at once, whatever the threads are doing), and every
request they send goes through `Watched`, a wrapper of the transports of huggingface_hub's own client:

- the request's timeouts are cut to the time left, and its body stops at the deadline;
- a connection that cannot be made (refused, no route to the host, a name that does not resolve) fails
  at once, where huggingface_hub would retry it for 23 s to the same end;
- a retry (the same request again after it failed) is said (`HubOptions.note`);
- an answer is refused as it arrives when huggingface_hub would build a path in its cache from a header
  that is not a plain token (`../../escape` as a commit or ETag), or when its body is over the size the
  caller can take (`capped`).

Nothing here knows the Hub's protocol; kimicount.hub does.
"""

from __future__ import annotations

import errno
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

from kimicount.errors import SourceError
from kimicount.reading import shorten
from kimicount.source import HubOptions

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


httpx = _http_library()


class OutOfTime(Exception):
    """The operation's deadline has passed (raised in the threads that do its requests)."""


class Unreachable(Exception):
    """No connection could be made to the Hub: refused, no route, or a host name that does not resolve.
    Not an httpx error, so that huggingface_hub passes it through instead of retrying it."""


class Refused(Exception):
    """An answer refused as it arrived (a header that would name a path outside the Hub cache, a body
    over what the caller takes). Not an httpx error either: huggingface_hub does not retry it."""


#: True once an operation's threads were left running: its deadline passed, Ctrl-C ended the wait, or
#: one of them failed while others still worked. The CLI then ends the process at once (kimicount.cli.exits).
abandoned = False


class Operation:
    """One Hub operation: when it must end, what it is doing (for the status line and the timeout
    message), the requests it has sent (a request sent again is a retry), and its threads at work."""

    def __init__(self, options: HubOptions, where: str):
        self.options = options
        self.where = where
        self.deadline = time.monotonic() + options.timeout
        self.doing = "starting"
        self.last_failure: str | None = None
        self.working = 0  # threads started and not yet done
        self._sent: Counter[tuple[str, str, str | None]] = Counter()
        self._failures: dict[tuple[str, str, str | None], str] = {}
        self._lock = threading.Lock()

    def status(self, text: str) -> None:
        self.doing = text
        self.options.status(text)

    def check(self) -> None:
        if time.monotonic() >= self.deadline:
            raise OutOfTime(self.where)

    def sending(self, request: Any) -> None:
        """Before each request: stop if the time is up, cut its timeouts to the time left, and say so
        when it repeats one that failed (huggingface_hub's retries)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime(self.where)
        timeouts = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {
            kind: min(timeouts.get(kind) or left, left) for kind in ("connect", "read", "write", "pool")
        }
        key = _key(request)
        with self._lock:
            retry, self._sent[key] = self._sent[key], self._sent[key] + 1
            reason = self._failures.get(key)
        if retry and reason:  # the same request again after it failed: huggingface_hub retries it
            self.options.note(f"{request.method} {request.url}: {reason}; retry {retry}")

    def failed(self, request: Any, reason: str) -> None:
        with self._lock:
            self._failures[_key(request)] = reason
            self.last_failure = reason

    def out_of_time(self) -> SourceError:
        last = f" (last failure: {self.last_failure})" if self.last_failure else ""
        return SourceError(
            f"{self.where}: gave up after {self.options.timeout:g} s (--timeout, KIMICOUNT_TIMEOUT) while "
            f"{self.doing}{last}"
        )

    def started(self) -> None:
        with self._lock:
            self.working += 1

    def ended(self) -> None:
        with self._lock:
            self.working -= 1


def _key(request: Any) -> tuple[str, str, str | None]:
    return request.method, str(request.url), request.headers.get("Range")


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
            _start(operation, lambda item=item: work(item), outcomes)
            started += 1
        return started

    waiting = start(MAX_WORKERS)
    while waiting:
        value = _value(outcomes.get())
        waiting += start(1) - 1
        yield value


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
            operation.failed(request, first_line(error))
            raise
        except httpx.TransportError as error:  # a timeout, a dropped connection: huggingface_hub retries
            operation.failed(request, f"{type(error).__name__}: {first_line(error)}")
            raise
        if response.status_code >= 500 or response.status_code in (408, 429):
            operation.failed(request, f"HTTP {response.status_code} {response.reason_phrase}".strip())
        try:
            _refuse_paths(request, response)
            limit, what = getattr(_thread, "body_limit", None) or (None, "")
            received = 0 if limit is None else _refuse_size(request, response, limit, what)
        except Refused:
            response.close()
            raise
        response.stream = _UntilDeadline(response.stream, operation, received, limit, what)
        return response

    def close(self) -> None:
        self._inner.close()


class _UntilDeadline(httpx.SyncByteStream):
    """A response body that stops at the deadline (a trickle never trips a read timeout), and past
    `limit` bytes of the file when there is one."""

    def __init__(self, inner: Any, operation: Operation, received: int, limit: int | None, what: str):
        self._inner = inner
        self._operation = operation
        self._received = received
        self._limit = limit
        self._what = what

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._operation.check()
            self._received += len(chunk)
            if self._limit is not None and self._received > self._limit:
                raise Refused(f"more than {self._limit:,} bytes, more than any {self._what}")
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
            return f"cannot resolve the host name ({seen.strerror or seen})"
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
