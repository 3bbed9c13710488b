"""Benchmark: verifying the full-size Kimi-K2-Instruct checkpoint from its headers, locally and over
the Hub protocol, side by side with what a user would use instead.

The checkpoint is the real tensor listing (fixtures/kimi-k2-instruct/tensors.json) laid out as 61
full-size shards whose data is a sparse hole (a few MB of disk). The Hub is a local server speaking
the Hub's file protocol (tests/fakehub.py), driven by the real huggingface_hub client.

    pip install -e ".[test]"           # pytest-httpserver provides the server
    python benchmarks/verify_speed.py

Local:  `kimicount verify --path` against a loop of `safetensors.safe_open` over every shard (what a
        user writes to list a checkpoint's tensors; it maps each file and checks nothing).
Hub:    `kimicount verify --repo` on main and at a commit, against huggingface_hub's own
        `get_safetensors_metadata` for the same repo: requests, bytes and time.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.checkpoints import kimi_k2_layout
from tests.fakehub import FakeHub

REPO = "moonshotai/Kimi-K2-Instruct"


def timed_process(command: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (bytes) and exit code of a command run to completion."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


SAFE_OPEN_LOOP = """
import sys
from pathlib import Path
from safetensors import safe_open
count = 0
for path in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    with safe_open(str(path), framework="numpy") as f:
        for name in f.keys():
            f.get_slice(name).get_shape()
            count += 1
assert count == 139644, count
"""

HUB_GET_METADATA = """
import sys
from huggingface_hub import get_safetensors_metadata
meta = get_safetensors_metadata(sys.argv[1])
count = sum(len(f.tensors) for f in meta.files_metadata.values())
assert count == 139644, count
"""


def best_of(runs: int, command: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    results = []
    for _ in range(runs):
        seconds, rss, code = timed_process(command, env)
        if code not in (0,):
            raise SystemExit(f"{' '.join(command)} exited {code}")
        results.append((seconds, rss))
    return min(results)


def local(folder: Path) -> None:
    header_bytes = sum(
        8 + int.from_bytes(p.open("rb").read(8), "little") for p in folder.glob("*.safetensors")
    )
    data_bytes = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    ours = best_of(5, [sys.executable, "-m", "kimicount", "verify", "--path", str(folder), "--json"])
    theirs = best_of(5, [sys.executable, "-c", SAFE_OPEN_LOOP, str(folder)])
    print(
        f"Local: 61 shards, {data_bytes / 2**30:,.0f} GiB of (sparse) data, {header_bytes / 2**20:.1f} MiB of headers"
    )
    print("| what | reads | time (best of 5) | peak RSS |")
    print("|---|---|---:|---:|")
    print(
        f"| `kimicount verify --path` (checks every tensor) | headers only, {header_bytes / 2**20:.1f} MiB "
        f"| {ours[0]:.2f} s | {ours[1] / 2**20:.0f} MiB |"
    )
    print(
        f"| `safe_open` loop listing names and shapes (checks nothing) | maps every file "
        f"| {theirs[0]:.2f} s | {theirs[1] / 2**20:.0f} MiB |"
    )


def hub(folder: Path) -> None:
    from pytest_httpserver import HTTPServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    files = {p.name: (p if p.suffix == ".safetensors" else p.read_bytes()) for p in folder.iterdir()}
    server = HTTPServer()
    server.start()
    try:
        print("\nHub protocol (local server, real huggingface_hub client, empty cache each run):")
        print("| what | HTTP requests | bytes received | time |")
        print("|---|---:|---:|---:|")
        fake = FakeHub()
        fake.add_repo(REPO, files)
        endpoint = fake.install(server)
        commit = fake.repos[REPO].commit
        runs = [
            (
                "`kimicount verify --repo` (main: bulk endpoint)",
                [sys.executable, "-m", "kimicount", "verify", "--repo", REPO, "--json"],
                True,
            ),
            (
                "`kimicount verify --repo --revision <commit>` (ranged reads)",
                [sys.executable, "-m", "kimicount", "verify", "--repo", REPO, "--revision", commit, "--json"],
                True,
            ),
            (
                "`kimicount verify --repo` (main, endpoint without the bulk route)",
                [sys.executable, "-m", "kimicount", "verify", "--repo", REPO, "--json"],
                False,
            ),
            (
                "huggingface_hub `get_safetensors_metadata` (headers only, checks nothing)",
                [sys.executable, "-c", HUB_GET_METADATA, REPO],
                True,
            ),
        ]
        for label, command, bulk in runs:
            fake.requests.clear()
            fake.bytes_sent = 0
            fake.bulk_endpoint = bulk
            with tempfile.TemporaryDirectory() as hf_home:
                env = {
                    **os.environ,
                    "HF_ENDPOINT": endpoint,
                    "HF_HOME": hf_home,
                    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                    "HF_HUB_DISABLE_TELEMETRY": "1",
                }
                seconds, _, code = timed_process(command, env)
            if code:
                raise SystemExit(f"{label}: exit {code}")
            print(f"| {label} | {len(fake.requests)} | {fake.bytes_sent / 2**20:.1f} MiB | {seconds:.2f} s |")
    finally:
        server.stop()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = kimi_k2_layout(Path(tmp) / "kimi-k2", config=ROOT / "fixtures/kimi-k2-instruct/config.json")
        local(folder)
        hub(folder)


if __name__ == "__main__":
    main()
