"""A local HTTP server that speaks the Hugging Face Hub's file protocol, for driving the real
huggingface_hub client with HF_ENDPOINT pointed at it.

It serves `HEAD` and `GET` (with `Range`) on `/{repo}/resolve/{revision}/{path}` the way the Hub does:
`X-Repo-Commit`, `ETag`, `Content-Length`, `206 Partial Content`, and the `X-Error-Code` header
(RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound) that huggingface_hub turns into its error
types. That is the only route it serves, the one the Hub documents for files (every other path is a
404), so a count of its requests is what the documented protocol costs. Every request is recorded so
tests and benchmarks can count them.

A test can make the Hub misbehave: `override` sees every request first and may answer it instead
(`trickle` sends a body one byte at a time, as a stalled link or a hostile server does).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from werkzeug import Request, Response

_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<path>.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
#: HfApi.list_repo_tree (list_repo_files): GET /api/models/{repo}/tree/{revision}[/{path}]?recursive=...
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<revision>[^/]+)(?:/(?P<path>.*))?$")


@dataclass
class FakeRepo:
    files: dict[str, bytes | Path]
    commit: str
    branches: tuple[str, ...] = ("main",)
    #: A gated or private repo answers only to this token.
    token: str | None = None


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    #: (method, path, Range header) of every request received.
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: Answer ranged GETs with the whole file (200), as some servers and proxies do.
    ignore_range: bool = False
    #: Response body bytes sent, for benchmarks.
    bytes_sent: int = 0
    #: Sees every request first; a Response it returns is sent instead of the Hub's own answer.
    override: Callable[[Request], Response | None] | None = None

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes | Path],
        *,
        commit: str = "0123456789abcdef0123456789abcdef01234567",
        token: str | None = None,
    ) -> FakeRepo:
        self.repos[repo_id] = FakeRepo(files=dict(files), commit=commit, token=token)
        return self.repos[repo_id]

    def install(self, httpserver) -> str:
        """Route every request of a pytest-httpserver to this hub; return the endpoint URL."""
        httpserver.expect_request(re.compile(".*")).respond_with_handler(self.handle)
        return httpserver.url_for("/").rstrip("/")

    def client_env(self, httpserver, home: Path) -> dict[str, str]:
        """Install on the server; return what a `python -m kimicount` run needs to reach this hub: HF_ENDPOINT
        at it, a fresh Hub cache (HF_HOME) in `home`/hf, telemetry off."""
        return {
            "HF_ENDPOINT": self.install(httpserver),
            "HF_HOME": str(home / "hf"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }

    def handle(self, request: Request) -> Response:
        response = (self.override and self.override(request)) or self._respond(request)
        self.requests.append((request.method, request.path, request.headers.get("Range")))
        self.bytes_sent += 0 if request.method == "HEAD" else response.content_length or 0
        return response

    def _respond(self, request: Request) -> Response:
        tree = _TREE.match(request.path)
        if tree:
            return self._tree(request, tree)
        match = _RESOLVE.match(request.path)
        if not match:
            return Response("Not Found", status=404)
        repo = self._repo(request, match)
        if isinstance(repo, Response):
            return repo
        content = repo.files.get(match["path"])
        if content is None:
            return _error(404, "EntryNotFound", "Entry not found")
        return _serve(request, content, repo.commit, self.ignore_range)

    def _repo(self, request: Request, match: re.Match) -> FakeRepo | Response:
        """The repo@revision the path names, or the Hub's error: 401 for an unknown repo (as for a private
        one, to callers without access) or a missing token, 404 for an unknown revision."""
        repo = self.repos.get(match["repo"])
        if repo is None:
            return _error(401, "RepoNotFound", "Repository not found")
        if repo.token is not None and request.headers.get("Authorization") != f"Bearer {repo.token}":
            return _error(401, "GatedRepo", "Access to this repo is restricted")
        if match["revision"] not in (*repo.branches, repo.commit):
            return _error(404, "RevisionNotFound", "Invalid rev id")
        return repo

    def _tree(self, request: Request, match: re.Match) -> Response:
        """The repo's files as the Hub lists them (one page: [{"type", "path", "size", "oid"}], folders
        as {"type": "directory", "path"}), under `path`, recursively or one level down."""
        repo = self._repo(request, match)
        if isinstance(repo, Response):
            return repo
        base = (match["path"] or "").strip("/")
        recursive = request.args.get("recursive", "").lower() == "true"
        entries, folders = [], set()
        for path, content in sorted(repo.files.items()):
            if base and not path.startswith(base + "/"):
                continue
            rest = path[len(base) + 1 :] if base else path
            if "/" in rest and not recursive:
                folders.add(f"{base}/{rest.split('/')[0]}" if base else rest.split("/")[0])
                continue
            if recursive:
                parts = rest.split("/")[:-1]
                folders.update("/".join(filter(None, [base, *parts[: i + 1]])) for i in range(len(parts)))
            size = content.stat().st_size if isinstance(content, Path) else len(content)
            entries.append({"type": "file", "path": path, "size": size, "oid": _etag(content)[:40]})
        listing = [{"type": "directory", "path": f, "oid": "0" * 40} for f in sorted(folders)] + entries
        return Response(json.dumps(listing), status=200, content_type="application/json")


def _error(status: int, code: str, message: str) -> Response:
    return Response(message, status=status, headers={"X-Error-Code": code, "X-Error-Message": message})


def _serve(request: Request, content: bytes | Path, commit: str, ignore_range: bool = False) -> Response:
    size = content.stat().st_size if isinstance(content, Path) else len(content)
    headers = {"X-Repo-Commit": commit, "ETag": f'"{_etag(content)}"', "Accept-Ranges": "bytes"}
    if request.method == "HEAD":
        response = Response(b"", status=200, headers=headers)
        response.headers["Content-Length"] = str(size)
        response.automatically_set_content_length = False
        return response
    start, end, status = 0, size - 1, 200
    wanted = None if ignore_range else _RANGE.match(request.headers.get("Range", ""))
    if wanted:
        start = int(wanted[1])
        end = min(int(wanted[2]) if wanted[2] else size - 1, size - 1)
        if start >= size:
            return Response(b"", status=416, headers={"Content-Range": f"bytes */{size}"})
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    return Response(_read(content, start, end + 1 - start), status=status, headers=headers)


#: Files given as a Path larger than this are not read for their ETag (see _etag).
_HASHED_PATH_BYTES = 64 * 2**20


def _etag(content: bytes | Path) -> str:
    """The ETag the Hub sends: the sha256 of the content (the LFS object id, as for the safetensors
    files the Hub keeps in LFS). A Path over 64 MiB (the benchmarks' full-size shards, sparse files of up
    to 1 TB) is not read for it: its ETag is the sha256 of its path, size and modification time, which
    changes when the file does, as a content hash would."""
    if isinstance(content, bytes):
        return hashlib.sha256(content).hexdigest()
    status = content.stat()
    if status.st_size > _HASHED_PATH_BYTES:
        return hashlib.sha256(f"{content}:{status.st_size}:{status.st_mtime_ns}".encode()).hexdigest()
    return hashlib.sha256(content.read_bytes()).hexdigest()


def _read(content: bytes | Path, start: int, length: int) -> bytes:
    if isinstance(content, bytes):
        return content[start : start + length]
    with content.open("rb") as file:
        file.seek(start)
        return file.read(length)


def trickle(
    body: bytes, headers: dict[str, str] | None = None, every: float = 0.2, status: int = 200
) -> Response:
    """An answer whose body comes one byte every `every` seconds: no read timeout ever fires. It stops
    when the client hangs up (or after 60 s, so that a test server is never stuck)."""

    def drip() -> Iterator[bytes]:
        end = time.monotonic() + 60
        for byte in body:
            if time.monotonic() > end:
                return
            yield bytes([byte])
            time.sleep(every)

    response = Response(drip(), status=status, headers=headers or {}, direct_passthrough=True)
    response.headers["Content-Length"] = str(len(body))
    return response
