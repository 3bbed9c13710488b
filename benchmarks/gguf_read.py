"""Reading a full-size GGUF header: gguf-py's GGUFReader against kimicount's header-only parser.

Writes Kimi K2 at Q6_K as one full-size GGUF (842,568,287,680 bytes; the header GGUFWriter writes from
the real tensor listing, with a 163,840-token vocabulary, then a sparse hole: a few MB of disk), then
reads it in a fresh process each way, several times, and prints the time and the peak resident memory
(ru_maxrss) of each.

    python benchmarks/gguf_read.py [FOLDER]

What was chosen, and why (kimicount/gguf/reader.py): our own parser of the header bytes, with gguf-py's
tables (value types, GGMLQuantizationType, GGML_QUANT_SIZES). GGUFReader opens the whole file as a
numpy.memmap and builds a numpy view per metadata field, per array item and per tensor; it needs the
file itself, so it cannot read the first megabytes of a file on the Hub, and it never reports what it
refused by field. The header parser reads the header once, front to back (1 MiB, then reads twice as
long), works on bytes from anywhere (a local file, a ranged GET), and names the file and the field
when something is wrong. On the file above (median of 3 fresh processes, imports included, on the
project's shared 2-core machine at a load average of 2, 2026-12-02; `python benchmarks/gguf_read.py
/tmp/gg`):

    GGUFReader                   6.056 s    246.0 MB peak RSS
    kimicount read_gguf          0.280 s     61.8 MB peak RSS
    baseline (imports only)      0.215 s     61.8 MB peak RSS

The parser before issue 26, which parsed the first MiB, then a window four times larger, each from
byte 0, took 1.338 s there. For headers built to cost the most, see benchmarks/hostile_input.py.

GGUFReader's extra time and memory go to the numpy objects it makes for every item of the metadata
arrays (163,840 tokens, their scores and types) and every tensor; the header parser skips numeric
arrays whole and keeps only the length of long ones. The figures vary with the machine.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = 3

READERS = {
    "GGUFReader": (
        "from gguf import GGUFReader\nr = GGUFReader(PATH)\nn = sum(int(t.n_bytes) for t in r.tensors)\n"
    ),
    "kimicount read_gguf": (
        "from kimicount.gguf.reader import read_gguf\nn = read_gguf(PATH).tensor_bytes\n"
    ),
    "baseline (imports only)": "import gguf, numpy\nn = 0\n",
}

TIMED = (
    "import resource, sys, time\n"
    "PATH = sys.argv[1]\n"
    "start = time.perf_counter()\n"
    "{body}"
    "elapsed = time.perf_counter() - start\n"
    "print(n, elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
)


def measure(body: str, path: Path) -> tuple[int, float, float]:
    """(tensor bytes, median seconds, median peak RSS in MB) over RUNS fresh processes."""
    results = []
    for _ in range(RUNS):
        out = subprocess.run(
            [sys.executable, "-c", TIMED.format(body=body), str(path)],
            check=True, capture_output=True, text=True, cwd=ROOT,
        ).stdout.split()  # fmt: skip
        results.append((int(out[0]), float(out[1]), int(out[2]) / 1024))
    return results[0][0], statistics.median(r[1] for r in results), statistics.median(r[2] for r in results)


def main() -> None:
    from tests.gguf_files import deepseek2_metadata, read_map, write_gguf
    from tests.test_gguf_reader import k2_q6_k

    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gguf-read-"))
    path = folder / "Kimi-K2-Instruct-Q6_K.gguf"
    if not path.exists():
        write_gguf(
            path,
            read_map("kimi-k2-thinking"),
            k2_q6_k,
            deepseek2_metadata("kimi-k2-thinking"),
            tokens=163_840,
        )
    print(f"{path}: {path.stat().st_size:,} bytes (sparse)")
    for name, body in READERS.items():
        tensor_bytes, seconds, rss = measure(body, path)
        print(f"{name:26} {seconds:7.3f} s  {rss:7.1f} MB peak RSS  tensor bytes {tensor_bytes:,}")


if __name__ == "__main__":
    main()
