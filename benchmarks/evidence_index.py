"""Regenerate kimicount/data/evidence-index.json, the lines each page cites in the bundled models'
modeling files, from the real file (a maintenance step, not run by the tests).

    python benchmarks/evidence_index.py PATH/modeling_deepseek.py          # rewrite the index
    python benchmarks/evidence_index.py PATH/modeling_deepseek.py --check  # only compare

PATH is the real modeling_deepseek.py (`hf download moonshotai/Kimi-K2-Instruct modeling_deepseek.py
--revision fd1984e2b7a3350dbf7305fe73a4ede25c14de50`); it is read, never copied into the project. The
explorer runs on it for each pinned model (kimicount's own `ast` locator), and the lines of every page
are written with the file's git blob hash. Before a model's lines are written, the file must give the
reference lines its revision is known by (DESIGN.md): a file of another layout is refused, not indexed.
The index made in this project was read from DeepSeek-R1's modeling_deepseek.py as first released
(git blob 4fa578ab05f12c819cb3f8606f94576bc52478d6, 1,849 lines, a public GitHub copy of the repo's
files: 1nl00k/inspectR1 at a412072, "original R1 files"), which gives every reference line of
Kimi-K2-Instruct's file at fd1984e2b7a3.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kimicount.explorer.build import ConfigSource, explorer_pages
from kimicount.explorer.evidence import ModelingIndex
from kimicount.explorer.pinned import INDEX, git_blob, page_lines
from kimicount.models import known_model

#: DESIGN.md's reference lines of Kimi-K2-Instruct's modeling_deepseek.py at fd1984e2b7a3 (the
#: attention's passages, ModelingIndex.attention_passages, and the RMSNorm class).
REFERENCE = {
    "projections": (662, 688),
    "query": (768, 774),
    "latent": (776, 789),
    "prefill attention": (799, 840),
    "output": (848, 852),
    "DeepseekV3RMSNorm": (94, 111),
}

#: The models whose modeling file kimicount pins: the revision, and why the file read stands for it.
PINS = {
    "moonshotai/Kimi-K2-Instruct": {
        "revision": "fd1984e2b7a3350dbf7305fe73a4ede25c14de50",
        "source": "the lines kimicount's locator finds in a modeling_deepseek.py that gives every reference "
        "line of this revision's (DESIGN.md: 662–688, 768–774, 776–789, 799–840, 848–852; RMSNorm 94–111)",
    },
    "deepseek-ai/DeepSeek-R1": {
        "revision": None,
        "source": "the lines kimicount's locator finds in DeepSeek-R1's modeling_deepseek.py as first "
        "released (the Hub commit was not recorded)",
    },
}

#: What each file that was indexed is, by git blob hash.
FILES = {
    "4fa578ab05f12c819cb3f8606f94576bc52478d6": "DeepSeek-R1's modeling_deepseek.py as first released "
    "(January 2025); its reference lines are those of Kimi-K2-Instruct's at fd1984e2b7a3",
}


def reference_lines(text: str) -> dict[str, tuple[int, int]]:
    """The reference passages as the locator finds them in `text`."""
    index = ModelingIndex.parse(text, file="modeling_deepseek.py")
    found = {name: (e.start, e.end) for name, e in index.attention_passages().items()}
    norm = index.class_("DeepseekV3RMSNorm")
    if norm:
        found["DeepseekV3RMSNorm"] = (norm[0].start, norm[0].end)
    return found


def build_index(modeling: Path, files: dict[str, str]) -> dict:
    """The index for every pinned model, from the modeling file at `modeling`."""
    data = modeling.read_bytes()
    text = data.decode("utf-8")
    found = reference_lines(text)
    if found != REFERENCE:
        wrong = {k: found.get(k) for k in REFERENCE if found.get(k) != REFERENCE[k]}
        raise SystemExit(f"{modeling}: not the pinned layout; reference lines differ: {wrong}")
    blob = git_blob(data)
    models = {}
    for repo, pin in PINS.items():
        known = known_model(repo)
        assert known is not None, repo
        source = ConfigSource(known.config_text(), None, None, "config.json", known.repo)
        pages = explorer_pages(known.spec(), source, modeling=modeling)
        models[repo] = {
            "file": "modeling_deepseek.py",
            "revision": pin["revision"],
            "blob": blob,
            "source": pin["source"],
            "pages": page_lines(pages.pages.values()),
        }
    return {
        "about": "Line ranges of each page's code evidence in the bundled models' modeling files, as "
        "kimicount's locator finds them; facts only (no line of the files). Made by "
        "benchmarks/evidence_index.py from the real file.",
        "files": {b: {"file": "modeling_deepseek.py", "description": d} for b, d in files.items()},
        "models": models,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modeling", type=Path, help="the real modeling_deepseek.py")
    parser.add_argument("--check", action="store_true", help="compare with the shipped index, write nothing")
    parser.add_argument("--output", type=Path, default=INDEX, help="where to write (default: the package's)")
    args = parser.parse_args()
    index = build_index(args.modeling, FILES)
    # one line per span: [start, end, role]
    text = re.sub(
        r"\[\s+(\d+),\s+(\d+),\s+(\"\w+\")\s+\]",
        r"[\1, \2, \3]",
        json.dumps(index, indent=1, ensure_ascii=False),
    )
    text += "\n"
    if args.check:
        shipped = json.loads(INDEX.read_text(encoding="utf-8"))
        same = shipped["models"] == index["models"]
        print("the shipped index agrees with the file" if same else "the shipped index differs from the file")
        raise SystemExit(0 if same else 1)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}: {sum(len(m['pages']) for m in index['models'].values())} pages")


if __name__ == "__main__":
    main()
