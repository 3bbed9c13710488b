"""Write the real Kimi-K2-Instruct checkpoint (fixtures/kimi-k2-instruct/tensors.json) as 61 full-size,
header-only safetensors shards with an index and config.json: each file is the real header followed by
a sparse hole as long as its tensor data, so ~1 TB of checkpoint costs a few MB of disk. Something to
run `kimicount verify --path` on without downloading a terabyte.

    python benchmarks/make_kimi_k2_headers.py /tmp/kimi-k2-headers
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.checkpoints import kimi_k2_layout


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "folder",
        type=Path,
        help="where to write the shards (created; a few MB on disk, the data left as sparse holes)",
    )
    args = parser.parse_args(argv)  # --help prints and exits before anything is written
    folder = kimi_k2_layout(args.folder, config=ROOT / "fixtures/kimi-k2-instruct/config.json")
    print(f"{folder}: {len(list(folder.glob('*.safetensors')))} header-only shards, index and config.json")


if __name__ == "__main__":
    main()
