"""Benchmark: verifying the full-size Kimi-K2-Instruct and Kimi K2.5 checkpoints from their headers,
side by side with what a user would use instead, and (with --hub) over the Hub protocol.

The checkpoints are the real tensor listing (fixtures/kimi-k2-instruct/tensors.json) laid out as 61
full-size shards whose data is a sparse hole (a few MB of disk), K2.5's layout derived from it
(tests/checkpoints.py: 208,550 tensors in 62 shards), and Kimi K3's in 96 shards (the release's 497,220
tensors, its routed experts as MXFP4 pairs, where kimicount models MXFP4; elsewhere a stand-in of as many
tensors, `kimi_k3_layout`), whose ratio it prints last; and the peak memory of reading K3's 59 MB index,
beside `json.load`. The Hub is a local server speaking the Hub's file protocol (tests/fakehub.py),
driven by the real huggingface_hub client.

    pip install -e ".[test]"           # pytest-httpserver provides the server
    python benchmarks/verify_speed.py [--rounds N] [--hub]

The peer is a loop of `safetensors.safe_open` over every shard that lists each tensor's name and shape
(what a user writes to list a checkpoint; it maps each file and checks nothing). Both are measured two
ways, in alternation, one round after another, so that a busy machine slows both alike:
- the whole command: `kimicount verify --path DIR --json` against `python -c <the loop>`, wall time of
  the process (Python start-up and imports included);
- the library: `read_folder` + `build_anatomy` + `verify` against the loop alone, each timed inside a
  fresh process after its imports; and the same without msgspec (the standard library's JSON).
The table gives medians over the rounds and the median of each round's ratio, in CPU time (user +
system, which a busy machine does not inflate as it does wall time) and in wall time. Every process
runs as an installed package runs, its bytecode compiled once (pip compiles a package's modules when
it installs them; a machine that sets PYTHONDONTWRITEBYTECODE=1 would otherwise compile kimicount's
modules again in every run, 0.1 s of each): into a temporary PYTHONPYCACHEPREFIX, by one untimed run
of each command first.

Instructions (--instructions): the whole command and the loop run once each under valgrind's callgrind,
which counts the instructions a process executes: the same on a busy machine as on an idle one, where
time is not (about a minute a run).

Hub (--hub): `kimicount verify --repo` on main and at a commit, against huggingface_hub's own
`get_safetensors_metadata` for the same repo: requests, bytes and time.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.checkpoints import kimi_k2_layout, kimi_k25_layout, write_header_only, write_index
from tests.fakehub import FakeHub

REPO = "moonshotai/Kimi-K2-Instruct"

# The peer: every shard's tensor names and shapes (argv: folder, expected count, "time" to print the
# loop's own seconds).
SAFE_OPEN_LOOP = """
import sys, time
from pathlib import Path
from safetensors import safe_open
start, cpu = time.perf_counter(), time.process_time()
count = 0
for path in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    with safe_open(str(path), framework="numpy") as f:
        for name in f.keys():
            f.get_slice(name).get_shape()
            count += 1
seconds = time.perf_counter() - start, time.process_time() - cpu
assert count == int(sys.argv[2]), count
if sys.argv[3:] == ["time"]:
    print(*seconds)
"""

# kimicount's library path, as `kimicount verify --path` runs it (argv: folder, expected count).
LIBRARY = """
import sys, time
if sys.argv[3:] == ["json"]:
    sys.modules["msgspec"] = None  # as if not installed: the standard library parses
from pathlib import Path
from kimicount.anatomy import build_anatomy
from kimicount.checkpoint import read_folder
from kimicount.spec import spec_from_path
from kimicount.verify import verify
start, cpu = time.perf_counter(), time.process_time()
folder = Path(sys.argv[1])
report = verify(build_anatomy(spec_from_path(folder)), read_folder(folder))
seconds = time.perf_counter() - start, time.process_time() - cpu
assert report.ok and report.tensors == int(sys.argv[2]), (report.tensors, report.mismatches[:3])
print(*seconds)
"""

HUB_GET_METADATA = """
import sys
from huggingface_hub import get_safetensors_metadata
meta = get_safetensors_metadata(sys.argv[1])
count = sum(len(f.tensors) for f in meta.files_metadata.values())
assert count == 139644, count
"""


#: The environment of every measured process: bytecode compiled once, kept in a temporary folder.
PYCACHE = tempfile.mkdtemp(prefix="kimicount-bench-pycache-")
atexit.register(shutil.rmtree, PYCACHE, ignore_errors=True)
COMPILED_ONCE = {
    **{key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPYCACHEPREFIX": PYCACHE,
}


def timed_process(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system) and stdout of a command that must succeed (by default
    with its bytecode compiled once, COMPILED_ONCE)."""
    env = COMPILED_ONCE if env is None else env
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(command)} failed: {text[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, text


def header_bytes(folder: Path) -> int:
    total = 0
    for path in folder.glob("*.safetensors"):
        with path.open("rb") as file:
            total += 8 + int.from_bytes(file.read(8), "little")
    return total


def local(folders: dict[str, tuple[Path, int]], rounds: int) -> None:
    python = sys.executable
    samples: dict[tuple[str, str, str], list[float]] = {}
    first = next(iter(folders.values()))
    for command in (  # untimed: each module's bytecode compiled and kept
        [python, "-m", "kimicount", "verify", "--path", str(first[0]), "--json"],
        [python, "-c", LIBRARY, str(first[0]), str(first[1])],
        [python, "-c", SAFE_OPEN_LOOP, str(first[0]), str(first[1])],
    ):
        timed_process(command)
    for _ in range(rounds):
        for label, (folder, count) in folders.items():
            for what, ours, peer in (
                (
                    "whole command",
                    [python, "-m", "kimicount", "verify", "--path", str(folder), "--json"],
                    [python, "-c", SAFE_OPEN_LOOP, str(folder), str(count)],
                ),
                (
                    "library",
                    [python, "-c", LIBRARY, str(folder), str(count)],
                    [python, "-c", SAFE_OPEN_LOOP, str(folder), str(count), "time"],
                ),
                (
                    "library, without msgspec",
                    [python, "-c", LIBRARY, str(folder), str(count), "json"],
                    [python, "-c", SAFE_OPEN_LOOP, str(folder), str(count), "time"],
                ),
            ):
                for who, command in (("ours", ours), ("peer", peer)):
                    wall, cpu, out = timed_process(command)
                    if what.startswith("library"):  # timed inside, after the imports
                        wall, cpu = map(float, out.split())
                    samples.setdefault((label, what, who), []).append((cpu, wall))

    def median(values):
        return statistics.median(values)

    print(
        f"Local, {rounds} rounds, medians. Seconds of CPU (user + system: what the work costs, however "
        "busy the machine); ratios are the median of each round's kimicount ÷ peer, in CPU and wall time."
    )
    print(
        "| checkpoint | measured | `kimicount verify --path` | `safe_open` loop (checks nothing) "
        "| ratio | ratio, wall time |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for label in folders:
        for what in ("whole command", "library", "library, without msgspec"):
            ours, peer = samples[label, what, "ours"], samples[label, what, "peer"]
            cpu_ratio = median(a[0] / b[0] for a, b in zip(ours, peer))
            wall_ratio = median(a[1] / b[1] for a, b in zip(ours, peer))
            print(
                f"| {label} | {what} | {median(a[0] for a in ours):.2f} s | {median(b[0] for b in peer):.2f} s "
                f"| {cpu_ratio:.2f}× | {wall_ratio:.2f}× |"
            )
    k3 = next((label for label in folders if label.startswith("Kimi K3")), None)
    if k3 is not None:
        ratio = median(
            a[0] / b[0]
            for a, b in zip(samples[k3, "whole command", "ours"], samples[k3, "whole command", "peer"])
        )
        print(
            f"\nThe K3 verify ratio (whole command, CPU time, median of the rounds): {ratio:.2f}× (target ≤ 1.5×)"
        )
    (first, (folder_a, _)), (second, (folder_b, _)) = list(folders.items())[:2]
    bytes_ratio = header_bytes(folder_b) / header_bytes(folder_a)
    a, b = samples[first, "library", "ours"], samples[second, "library", "ours"]
    print(
        f"\n{second} ÷ {first}: header bytes {bytes_ratio:.2f}×; kimicount's library "
        f"{median(y[0] / x[0] for x, y in zip(a, b)):.2f}× in CPU time, "
        f"{median(y[1] / x[1] for x, y in zip(a, b)):.2f}× in wall time (medians of the rounds)"
    )


INDEX_READERS = {
    "kimicount, as verify reads it (per shard: names listed, their digest)": (
        "from kimicount.checkpoint import read_index_file; read_index_file(Path(sys.argv[1]), keep_map=False)"
    ),
    "kimicount, map and all (verify --index)": (
        "from kimicount.checkpoint import read_index_file; read_index_file(Path(sys.argv[1]))"
    ),
    "`json.load` (the whole map)": "import json; json.load(open(sys.argv[1], 'rb'))",
    "Python, importing kimicount.checkpoint only": "import kimicount.checkpoint",
}


# Runs argv[1:] and prints its peak memory [KiB] and CPU seconds: measured from a small process, since a
# child forked from this one would count this one's pages (ru_maxrss keeps the peak from before exec).
PEAK = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(usage.ru_maxrss, usage.ru_utime + usage.ru_stime)
"""


def index_memory(folder: Path, rounds: int) -> None:
    """Peak memory and CPU time of a process that reads the index, each way."""
    index = folder / "model.safetensors.index.json"
    print(
        f"\nReading {folder.name}'s index ({index.stat().st_size / 1e6:.1f} MB), one process each, medians:"
    )
    print("| reader | peak memory | CPU time |")
    print("|---|---:|---:|")
    for label, code in INDEX_READERS.items():
        samples = []
        for _ in range(rounds):
            reader = [sys.executable, "-c", f"import sys; from pathlib import Path; {code}", str(index)]
            _, _, out = timed_process([sys.executable, "-c", PEAK, *reader])
            kib, cpu = out.split()
            samples.append((int(kib) / 1024, float(cpu)))
        memory = statistics.median(m for m, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        print(f"| {label} | {memory:.0f} MiB | {cpu:.2f} s |")


def instructions(command: list[str]) -> int:
    """Instructions the process `command` executes, as valgrind's callgrind counts them."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        capture_output=True,
        text=True,
        check=True,
        env=COMPILED_ONCE,
    ).stderr
    return int(re.search(r"I\s+refs:\s+([\d,]+)", out).group(1).replace(",", ""))


def count_instructions(folders: dict[str, tuple[Path, int]]) -> None:
    print(
        "\nInstructions executed, whole processes (valgrind callgrind; Python start-up and imports included):"
    )
    print("| checkpoint | `kimicount verify --path --json` | `safe_open` loop | ratio |")
    print("|---|---:|---:|---:|")
    for label, (folder, count) in folders.items():
        ours = instructions([sys.executable, "-m", "kimicount", "verify", "--path", str(folder), "--json"])
        peer = instructions([sys.executable, "-c", SAFE_OPEN_LOOP, str(folder), str(count)])
        print(f"| {label} | {ours / 1e9:.2f} G | {peer / 1e9:.2f} G | {ours / peer:.2f}× |")


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
                "`kimicount verify --repo` (main: config, index, one ranged read per shard)",
                [sys.executable, "-m", "kimicount", "verify", "--repo", REPO, "--json"],
            ),
            (
                "`kimicount verify --repo --revision <commit>` (the same at a commit)",
                [sys.executable, "-m", "kimicount", "verify", "--repo", REPO, "--revision", commit, "--json"],
            ),
            (
                "huggingface_hub `get_safetensors_metadata` (headers only, checks nothing)",
                [sys.executable, "-c", HUB_GET_METADATA, REPO],
            ),
        ]
        for label, command in runs:
            fake.requests.clear()
            fake.bytes_sent = 0
            with tempfile.TemporaryDirectory() as hf_home:
                env = {
                    **COMPILED_ONCE,
                    "HF_ENDPOINT": endpoint,
                    "HF_HOME": hf_home,
                    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                    "HF_HUB_DISABLE_TELEMETRY": "1",
                }
                seconds, _, _ = timed_process(command, env)
            print(f"| {label} | {len(fake.requests)} | {fake.bytes_sent / 2**20:.1f} MiB | {seconds:.2f} s |")
    finally:
        server.stop()


def kimi_k3_layout(folder: Path) -> tuple[Path, int, str]:
    """Kimi K3's layout as header-only shards (96, as the release has: one per language-model layer, then
    the embedding, the vision side, and the final norm with the head), from its bundled config and
    kimicount's tree: every tensor at its release dtype (fixtures/kimi-k3/README.md: F32 convolutions,
    A_log, dt_bias, o_norm and router bias; BF16 the rest) and each routed expert weight as its two MXFP4
    tensors, `weight_packed` U8 [out, in / 2] and `weight_scale` U8 [out, in / 32]: the release's 497,220
    tensors and 1,560,860,324,864 bytes, checked here. Verified under the real config where kimicount
    models MXFP4; elsewhere under a stand-in config that stores the same layout's experts as FP8 pairs
    (`weight` F8_E4M3 and `weight_scale_inv` F32, one per 128 × 128), which also gives the 975 other
    Linears a scale: as many tensors to within 0.2 %, of names as long. A benchmark's layout, not a
    test's expectation."""
    import json

    from kimicount.anatomy import build_anatomy
    from kimicount.spec import spec_from_config
    from kimicount.storage import modelled, plain_dtypes

    config = json.loads((ROOT / "fixtures/kimi-k3/config.json").read_text())
    real = modelled(spec_from_config(config, name="moonshotai/Kimi-K3", where="benchmark"))
    plain = json.loads(json.dumps(config))
    del plain["text_config"]["quantization_config"]
    spec = spec_from_config(plain, name="moonshotai/Kimi-K3", where="benchmark")
    anatomy = build_anatomy(spec)
    listing: dict[str, tuple[tuple[int, ...], str]] = {}
    for tree in (anatomy.model, anatomy.vision):
        for node in tree.walk():
            for ref in node.tensors:
                dtype = plain_dtypes(spec, ref.role)[0]
                out, inputs = (ref.shape + (0,))[:2]
                for name in ref.names():
                    stem = name.removesuffix(".weight")
                    if real and ref.experts:
                        listing[stem + ".weight_packed"] = ((out, -(-inputs // 2)), "U8")
                        listing[stem + ".weight_scale"] = ((out, -(-inputs // 32)), "U8")
                    elif not real and ref.role.value == "linear" and tree is anatomy.model:
                        listing[name] = (ref.shape, "F8_E4M3")
                        listing[name + "_scale_inv"] = ((-(-out // 128), -(-inputs // 128)), "F32")
                    else:
                        listing[name] = (ref.shape, dtype)
    shards: dict[str, dict] = {}
    for name, entry in sorted(listing.items()):
        if name.startswith("language_model.model.layers."):
            shard = int(name.split(".")[3]) + 1
        elif name.startswith("language_model.model.embed_tokens."):
            shard = 94
        else:
            shard = 96 if name.startswith("language_model.") else 95
        shards.setdefault(f"model-{shard:05d}-of-00096.safetensors", {})[name] = entry
    folder.mkdir(parents=True)
    total = sum(write_header_only(folder / file, tensors) for file, tensors in shards.items())
    write_index(folder, shards, total)
    if real:
        assert (len(listing), total) == (497_220, 1_560_860_324_864), (len(listing), total)
    else:
        config = plain
        config["text_config"]["quantization_config"] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "weight_block_size": [128, 128],
        }
    (folder / "config.json").write_text(json.dumps(config))
    what = "MXFP4 experts" if real else "experts as FP8 pairs (a stand-in: MXFP4 not modelled)"
    return folder, len(listing), f"Kimi K3, {what} ({len(listing):,} tensors, 96 shards)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds of every measurement")
    parser.add_argument("--hub", action="store_true", help="also measure the Hub protocol (local server)")
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions under valgrind (minutes)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        k2 = kimi_k2_layout(Path(tmp) / "kimi-k2", config=ROOT / "fixtures/kimi-k2-instruct/config.json")
        k25 = kimi_k25_layout(Path(tmp) / "kimi-k2.5")
        k3, k3_tensors, k3_label = kimi_k3_layout(Path(tmp) / "kimi-k3")
        folders = {
            "Kimi K2 (139,644 tensors)": (k2, 139_644),
            "Kimi K2.5 (208,550 tensors)": (k25, 208_550),
            k3_label: (k3, k3_tensors),
        }
        local(folders, args.rounds)
        index_memory(k3, args.rounds)
        if args.instructions:
            count_instructions(folders)
        if args.hub:
            hub(k2)


if __name__ == "__main__":
    main()
