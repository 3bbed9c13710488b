"""Hostile input, measured (issue 26): the wall time and peak resident memory of one kimicount run on
each case, in a fresh process, beside what a user would use instead where there is such a thing
(gguf-py's GGUFReader, for a GGUF). Every file is written here, small or sparse.

    python benchmarks/hostile_input.py [--tree DIR] [--only CASE ...] [FOLDER]

`--tree DIR` runs the kimicount of another checkout (`git archive main | tar -x -C DIR`): the figures
before a change. Every run is cut at LIMIT seconds and MEMORY of address space (GGUFReader on 2^24
strings, uncapped, was killed by the kernel at 23.6 GB after 513 s; main on split.count 2^40 reached
15.8 GB in two minutes).

Measured on the project's shared 2-core machine, 2026-12-02, with a load average of about 5 from other
work (the times are two to three times those of a quiet machine; the memory is not): before is main at
632e61a, after is the branch of issue 26. "Refused" is exit 2 and one line naming the field.

| case | before | after | GGUFReader |
|---|---|---|---|
| GGUF, 2^24 empty strings (a 128 MiB header, sparse) | 76.0 s, 310 MB | 0.85 s, 35 MB, refused from the count | MemoryError at 4 GiB after 84.8 s |
| GGUF, 8,388,595 empty strings (64 MiB, just under the cap) | 25.2 s, 182 MB | 1.83 s, 83 MB | MemoryError at 4 GiB after 72.8 s |
| GGUF, a million keys (a 21 MB header) | 8.45 s, 174 MB | 0.50 s, 35 MB, refused from the count | 108.4 s, 3,086 MB |
| GGUF, 262,144 tensors (11 MB) | 3.83 s, 131 MB | 3.69 s, 112 MB | 61.0 s, 1,324 MB |
| GGUF, split.count 2^40 | exit 3, MemoryError at 4 GiB after 30.8 s | 0.63 s, 34 MB, refused | |
| Hub GGUF of 1 TiB claiming 2^25 strings | 256 MiB in 5 requests, then --timeout 60 s, 726 MB | 1 request of 1 MiB, 1.6 s, refused | |
| Hub answering each range with 4 bytes (an 8,049-byte file) | 2,013 requests, 12.5 s | 3 requests (tries), 3.8 s, exit 2 | |
| modeling file just under 16 MiB | 26.4 s, 2,739 MB | 0.50 s, refused: over 1 MiB | |
| modeling file of 1 MiB, one statement a line | 3.06 s, 322 MB | 2.40 s, 323 MB | |
| modeling file of 1 MiB, a forward of 47,000 uses of self.kv_b_proj | 56.5 s, 191 MB | 3.97 s, 191 MB | |

GGUFReader, gguf-py's own reader, maps the file and makes numpy objects of every field and array item;
it has no bound of its own, so a hostile header costs it what the header says. kimicount's reader reads
the header once, front to back, and refuses what cannot fit before reading it (kimicount/gguf/reader.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Seconds a run may take before it is cut (and reported as cut).
LIMIT = 120
#: The address space of every run, so that none can take the machine's memory.
MEMORY = 4 << 30
#: The checkout whose kimicount runs (`python -m` looks in the working folder first).
TREE = ROOT


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def gguf_header(kv: bytes = b"", kv_count: int = 0, tensor_count: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensor_count, kv_count) + kv


def strings(folder: Path, count: int) -> Path:
    """One key whose value is an array of `count` empty strings: 8 zero bytes each, a sparse hole."""
    data = gguf_header(gguf_string("k") + struct.pack("<IIQ", 9, 8, count), kv_count=1)
    path = folder / f"strings-{count}.gguf"
    path.write_bytes(data)
    os.truncate(path, len(data) + 8 * count)
    return path


def keys(folder: Path) -> Path:
    path = folder / "keys.gguf"
    pairs = b"".join(gguf_string(f"k{i:07d}") + struct.pack("<IB", 0, 1) for i in range(10**6))
    path.write_bytes(gguf_header(pairs, kv_count=10**6))
    return path


def tensors(folder: Path) -> Path:
    """262,144 F32 tensors of 8 elements, one after another (32 bytes each)."""
    count = 1 << 18
    infos = b"".join(gguf_string(f"blk.{i}.x") + struct.pack("<IQIQ", 1, 8, 0, 32 * i) for i in range(count))
    data = gguf_header(tensor_count=count) + infos
    path = folder / "tensors.gguf"
    path.write_bytes(data)
    os.truncate(path, -(-len(data) // 32) * 32 + 32 * count)
    return path


def split_count(folder: Path) -> Path:
    path = folder / "m-00001-of-00002.gguf"
    path.write_bytes(gguf_header(gguf_string("split.count") + struct.pack("<IQ", 10, 2**40), kv_count=1))
    return path


def modeling(folder: Path, name: str, padding: Callable[[str, int], str]) -> Path:
    """A folder with Kimi K2's config.json and the tests' modeling_deepseek.py, padded to 1 MiB."""
    target = folder / name
    target.mkdir(exist_ok=True)
    (target / "config.json").write_bytes(
        (ROOT / "fixtures" / "kimi-k2-instruct" / "config.json").read_bytes()
    )
    base = (ROOT / "tests" / "data" / "modeling_deepseek.py.txt").read_text()
    (target / "modeling_deepseek.py").write_text(padding(base, 2**20 - 200 - len(base)))
    return target


def dense_statements(base: str, budget: int) -> str:
    return base + "\n\ndef padding():\n" + "    a\n" * ((budget - 20) // 6)


def forward_uses(base: str, budget: int) -> str:
    marker = '        if "padding_mask" in kwargs:\n'
    line = "        x = self.kv_b_proj(x)\n"
    return base.replace(marker, line * (budget // len(line)) + marker)


def just_under_16_mib(base: str, budget: int) -> str:
    line = "    self_x = 1\n"
    return base + "\n\ndef padding():\n" + line * ((16 * 2**20 - 1000 - len(base)) // len(line))


def measure(args: list[str], *, env: dict[str, str] | None = None) -> str:
    """One fresh process: `seconds s, peak MB, exit N` (or `cut at LIMIT s`), in at most MEMORY of
    address space (before, split.count 2^40 took 15.8 GB in two minutes)."""
    start = time.monotonic()
    process = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, cwd=TREE
    )
    # at once, from here (a preexec_fn is unsafe beside the Hub server's threads)
    resource.prlimit(process.pid, resource.RLIMIT_AS, (MEMORY, MEMORY))
    cut = False
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > LIMIT:
            process.send_signal(signal.SIGKILL)
            cut = True
        time.sleep(0.02)
    seconds = time.monotonic() - start
    last = (
        (process.stderr.read().decode(errors="replace").strip().splitlines() or [""])[-1]
        if process.stderr
        else ""
    )
    code = os.waitstatus_to_exitcode(status)
    end = f"cut at {LIMIT} s" if cut else f"exit {code}"
    return f"{seconds:.2f} s, {usage.ru_maxrss / 1024:.0f} MB, {end}: {last[:150]}"


READER = "import sys; from gguf import GGUFReader; r = GGUFReader(sys.argv[1]); print(len(r.fields))"


def local_cases(folder: Path) -> dict[str, tuple[list[str], bool]]:
    """case -> (kimicount arguments, whether GGUFReader reads it too)."""
    return {
        "strings-2^24": (["gguf", str(strings(folder, 2**24))], True),
        "strings-under-cap": (["gguf", str(strings(folder, (64 * 2**20 - 100) // 8))], True),
        "million-keys": (["gguf", str(keys(folder))], True),
        "262144-tensors": (["gguf", str(tensors(folder))], True),
        "split-count-2^40": (["gguf", str(split_count(folder))], False),
        "modeling-16-mib": (["show", "kv_b_proj", "--config", str(modeling(folder, "m16", just_under_16_mib))], False),
        "modeling-dense": (["show", "kv_b_proj", "--config", str(modeling(folder, "dense", dense_statements))], False),
        "modeling-forward": (["show", "kv_b_proj", "--config", str(modeling(folder, "forward", forward_uses))], False),
    }  # fmt: skip


def hub_cases(folder: Path, kimicount: list[str], only: set[str]) -> None:
    """The Hub cases, against a local server speaking the Hub's protocol (tests/fakehub.py)."""
    import logging

    from pytest_httpserver import HTTPServer
    from werkzeug import Response

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # not a line per request

    from tests.fakehub import FakeHub

    huge = folder / "huge.gguf"
    huge.write_bytes(gguf_header(gguf_string("k") + struct.pack("<IIQ", 9, 8, 2**25), kv_count=1))
    os.truncate(huge, 2**40)
    small = strings(folder, 1000)
    server = HTTPServer(threaded=True)
    server.start()
    try:

        def four_bytes(request):  # the 4 bytes from where each range starts
            asked = re.fullmatch(r"bytes=([0-9]+)-[0-9]*", request.headers.get("Range", ""))
            if asked is None:
                return None
            start = int(asked[1])
            body = small.read_bytes()[start : start + 4]
            headers = {"Content-Range": f"bytes {start}-{start + 3}/{small.stat().st_size}"}
            return Response(body, status=206, headers=headers)

        for case, path, override in [("hub-huge-array", huge, None), ("hub-4-bytes", small, four_bytes)]:
            if only and case not in only:
                continue
            fake = FakeHub(override=override)
            fake.add_repo("someone/gguf", {path.name: path})
            env = {**fake.client_env(server, folder / case), "HF_HUB_DISABLE_TELEMETRY": "1"}
            figures = measure([*kimicount, "gguf", "--repo", "someone/gguf", "--timeout", "60"], env=env)
            ranged = [r for _, p, r in fake.requests if "/resolve/" in p]
            print(
                f"{case:22} {figures}\n{'':22} {len(ranged)} ranged requests, {fake.bytes_sent:,} bytes sent"
            )
            server.clear()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("--tree", type=Path, help="run the kimicount of this checkout instead")
    parser.add_argument("--only", nargs="*", default=[], help="only these cases")
    options = parser.parse_args()
    folder = options.folder or Path(tempfile.mkdtemp(prefix="hostile-"))
    folder.mkdir(parents=True, exist_ok=True)
    global TREE
    TREE = options.tree.resolve() if options.tree else ROOT
    kimicount = [sys.executable, "-m", "kimicount"]
    only = set(options.only)
    print(f"kimicount from {options.tree or ROOT}; files in {folder}")
    for case, (args, reader) in local_cases(folder).items():
        if only and case not in only:
            continue
        print(f"{case:22} {measure([*kimicount, *args])}")
        if reader and not options.tree:
            print(f"{'  GGUFReader':22} {measure([sys.executable, '-c', READER, args[-1]])}")
    hub_cases(folder, kimicount, only)
    print(json.dumps({"limit_s": LIMIT, "memory": MEMORY}))


if __name__ == "__main__":
    main()
