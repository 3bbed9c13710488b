"""`kimicount verify --repo`: the real huggingface_hub client against a local server that serves the
full-size Kimi K2 layout the way the Hub does; requests are counted on the server."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections import Counter
from pathlib import Path

import pytest

from .checkpoints import kimi_k2_layout, write_header_only
from .fakehub import FakeHub
from .helpers import KIMI_K2, run_kimicount

REPO = "moonshotai/Kimi-K2-Instruct"


@pytest.fixture(scope="module")
def kimi_k2_files(tmp_path_factory) -> dict[str, bytes | Path]:
    folder = kimi_k2_layout(tmp_path_factory.mktemp("hub-kimi-k2"), config=KIMI_K2 / "config.json")
    return {
        path.name: (path if path.suffix == ".safetensors" else path.read_bytes()) for path in folder.iterdir()
    }


@pytest.fixture
def hub(httpserver, tmp_path, kimi_k2_files):
    fake = FakeHub()
    fake.add_repo(REPO, kimi_k2_files)
    env = fake.client_env(httpserver, tmp_path)
    return fake, env


def verify_repo(env, *args: str):
    result = run_kimicount("verify", "--repo", REPO, *args, "--json", env=env)
    assert result.stderr == "" or result.returncode != 0, result.stderr
    return result.returncode, json.loads(result.stdout) if result.stdout else None, result.stderr


def _check_kimi_k2(report: dict) -> None:
    assert report["ok"] and report["mismatches"] == []
    assert report["tensors"] == 139_644
    assert report["parameters"] == {"expected": 1_026_408_232_448, "found": 1_026_408_232_448}
    assert report["fp8_scales"]["elements"] == 62_495_192
    assert report["rotary_buffers"]["elements"] == 3_416
    assert report["index"]["total_size"] == 1_029_173_256_720


def test_main_costs_the_config_the_index_and_one_ranged_read_per_shard(hub):
    # The documented protocol only (docs/hub.md), counted on a server that serves nothing else:
    #   config.json through the Hub cache, as hf_hub_download fetches a file:  HEAD + GET  =  2
    #   model.safetensors.index.json, one GET beside it                               =  1
    #   each of Kimi K2's 61 shards, one ranged GET of its header (the index sizes
    #   the range so that every header fits in it)                                     = 61
    #                                                                             total = 64
    fake, env = hub
    code, report, _ = verify_repo(env)
    assert code == 0
    _check_kimi_k2(report)
    assert len(fake.requests) == 2 + 1 + 61
    commit = fake.repos[REPO].commit
    shard_reads = [(m, p, r) for m, p, r in fake.requests if p.endswith(".safetensors")]
    assert len({p for _, p, _ in shard_reads}) == 61
    assert all(m == "GET" and p.startswith(f"/{REPO}/resolve/{commit}/") for m, p, _ in shard_reads)
    assert all(r is not None and r.startswith("bytes=0-") for _, _, r in shard_reads)
    assert sorted((m, p) for m, p, _ in fake.requests if not p.endswith(".safetensors")) == [
        ("GET", f"/{REPO}/resolve/main/config.json"),
        ("GET", f"/{REPO}/resolve/main/model.safetensors.index.json"),
        ("HEAD", f"/{REPO}/resolve/main/config.json"),
    ]
    # the index goes out beside the config, before any shard: the round trips do not grow on main
    assert max(fake.requests.index(r) for r in fake.requests if not r[1].endswith(".safetensors")) < 3
    assert report["read"]["requests"] == 61


def test_no_other_route_is_asked(hub):
    # A stand-in that answers every /api/models/... path with the model's info (as a local mirror may)
    # changes nothing: that route is never asked.
    from werkzeug import Response

    fake, env = hub
    fake.override = lambda r: (
        Response(json.dumps({"id": REPO, "sha": "x"}), content_type="application/json")
        if r.path.startswith("/api/")
        else None
    )
    code, report, stderr = verify_repo(env)
    assert code == 0, stderr
    _check_kimi_k2(report)
    assert not any(path.startswith("/api/") for _, path, _ in fake.requests)


def test_a_repo_named_as_hf_download_names_it(hub):
    # `kimicount verify ORG/NAME` is `--repo ORG/NAME`: the same checks at the same commit
    fake, env = hub
    commit = fake.repos[REPO].commit
    result = run_kimicount("verify", REPO, "--revision", commit, "--json", env=env)
    assert result.returncode == 0, result.stderr
    _check_kimi_k2(json.loads(result.stdout))


def test_a_revision_costs_one_ranged_read_per_shard(hub):
    fake, env = hub
    commit = fake.repos[REPO].commit
    code, report, _ = verify_repo(env, "--revision", commit)
    assert code == 0
    _check_kimi_k2(report)
    shard_reads = Counter(path for method, path, _ in fake.requests if path.endswith(".safetensors"))
    assert len(shard_reads) == 61 and set(shard_reads.values()) == {1}  # the header fit in every first read
    ranges = {r for _, path, r in fake.requests if path.endswith(".safetensors")}
    assert all(r.startswith("bytes=0-") for r in ranges)
    # config.json through the Hub cache (HEAD + GET); beside it the index (one GET); one GET per shard
    assert len(fake.requests) == 2 + 1 + 61
    assert fake.requests.index(("GET", f"/{REPO}/resolve/{commit}/model.safetensors.index.json", None)) < 3
    assert report["read"]["requests"] == 61
    headers = sum(
        8 + struct.unpack("<Q", p.open("rb").read(8))[0]
        for p in fake.repos[REPO].files.values()
        if isinstance(p, Path)
    )
    assert headers <= report["read"]["header_bytes"] < 2 * headers  # never the tensor data


def test_single_file_repo_and_a_long_header(httpserver, tmp_path):
    # A header longer than the first read: the rest is fetched with a second ranged GET.
    names = {f"model.layers.0.mlp.experts.{e}.up_proj.weight": ((16, 8), "BF16") for e in range(4000)}
    write_header_only(tmp_path / "model.safetensors", names)
    fake = FakeHub()
    fake.add_repo(
        "org/single",
        {
            "config.json": (KIMI_K2 / "config.json").read_bytes(),
            "model.safetensors": tmp_path / "model.safetensors",
        },
    )
    env = {"HF_ENDPOINT": fake.install(httpserver), "HF_HOME": str(tmp_path / "hf")}
    result = run_kimicount("verify", "--repo", "org/single", "--json", env=env)
    assert result.returncode == 1, result.stderr  # not Kimi K2: mismatches, but read correctly
    report = json.loads(result.stdout)
    assert report["tensors"] == 4000 and report["read"]["requests"] == 2
    assert sum(path.endswith("model.safetensors") for _, path, _ in fake.requests) == 2


def test_a_lying_header_on_the_hub_exits_2(hub, tmp_path):
    fake, env = hub
    shard = "model-00007-of-00061.safetensors"
    lying = tmp_path / shard
    lying.write_bytes(struct.pack("<Q", 10**9) + b"{}")
    fake.repos[REPO].files[shard] = lying
    commit = fake.repos[REPO].commit
    code, _, stderr = verify_repo(env, "--revision", commit)
    assert code == 2
    assert stderr.count("\n") == 1 and f"{shard}: header length 1,000,000,000 bytes is over" in stderr


def test_a_shard_missing_on_the_hub_exits_2(hub):
    fake, env = hub
    del fake.repos[REPO].files["model-00030-of-00061.safetensors"]
    code, _, stderr = verify_repo(env)
    assert code == 2
    assert "no file 'model-00030-of-00061.safetensors' in the repo" in stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--repo", "nobody/nothing"], "nobody/nothing@main: repo not found"),
        (["--repo", REPO, "--revision", "v9"], "revision 'v9' not found"),
    ],
)
def test_missing_repo_or_revision_exits_2(hub, args, needle):
    _, env = hub
    result = run_kimicount("verify", *args, env=env)
    assert result.returncode == 2 and needle in result.stderr and result.stderr.count("\n") == 1


def test_gated_repo_needs_its_token(hub, kimi_k2_files):
    fake, env = hub
    fake.add_repo("org/gated", kimi_k2_files, token="hf_secret")
    denied = run_kimicount("verify", "--repo", "org/gated", env=env)
    assert denied.returncode == 2 and "gated repo" in denied.stderr
    allowed = run_kimicount("verify", "--repo", "org/gated", "--json", env={**env, "HF_TOKEN": "hf_secret"})
    assert allowed.returncode == 0, allowed.stderr
    # the token on the command line, as `hf download --token` takes it, for every command with --repo
    allowed = run_kimicount("verify", "--repo", "org/gated", "--token", "hf_secret", "--json", env=env)
    assert allowed.returncode == 0, allowed.stderr
    params = run_kimicount("params", "--repo", "org/gated", "--token", "hf_secret", "--json", env=env)
    assert params.returncode == 0 and json.loads(params.stdout)["total"] == 1_026_408_232_448


# --- a Hub that cannot be reached, or fails now and then: say so, and fast --------------------------


def test_a_refused_connection_fails_at_once(tmp_path):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(tmp_path / "hf")}
    start = time.monotonic()
    result = run_kimicount("params", "--repo", "mirror/Kimi-K2-Instruct", env=env)  # a repo not bundled
    # huggingface_hub alone retries a refused connection for 23 s (1 + 2 + 4 + 8 + 8 s of back-off)
    assert time.monotonic() - start < 10
    assert result.returncode == 2 and result.stderr == (
        f"kimicount: error: mirror/Kimi-K2-Instruct@main: cannot reach http://127.0.0.1:{port}: connection refused; "
        "mirror/Kimi-K2-Instruct is not one of the models kimicount bundles (`kimicount models` lists them): "
        "give its config.json with --config PATH\n"
    )


def test_a_refused_connection_falls_back_on_the_cached_config(hub):
    _, env = hub
    # --revision main: a bundled model's name reads the Hub's config only at a revision asked for
    assert run_kimicount("params", "--repo", REPO, "--revision", "main", "--json", env=env).returncode == 0
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    local = {**env, "HF_ENDPOINT": f"http://127.0.0.1:{port}"}
    result = run_kimicount("params", "--repo", REPO, "--revision", "main", "--json", env=local)
    assert result.returncode == 0 and json.loads(result.stdout)["total"] == 1_026_408_232_448
    assert result.stderr == (
        f"kimicount: cannot reach http://127.0.0.1:{port} (connection refused); config.json from the cache\n"
    )


def test_retries_are_said(hub):
    from werkzeug import Response

    fake, env = hub
    failures = [503]  # the first HEAD of config.json fails; huggingface_hub retries it

    def flaky(request):
        if request.path.endswith("/config.json") and failures:
            return Response("busy", status=failures.pop())
        return None

    fake.override = flaky
    result = run_kimicount("params", "--repo", REPO, "--revision", "main", "--json", env=env)
    assert result.returncode == 0, result.stderr
    url = f"{env['HF_ENDPOINT']}/{REPO}/resolve/main/config.json"
    assert result.stderr == f"kimicount: HEAD {url}: HTTP 503 SERVICE UNAVAILABLE; try 2 of 3\n"


def test_the_hub_modules_import_nothing_above_them():
    # source -> hub -> hub_transport -> options: the Hub client reads its options from below, so neither
    # it nor its transport imports kimicount.source (which imports them when a repo is named).
    import subprocess
    import sys

    probe = (
        "import sys, kimicount.hub, kimicount.hub_transport\n"
        "print(sorted(m for m in sys.modules if m in ('kimicount.source', 'kimicount.cli')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"
    from kimicount.options import HubOptions
    from kimicount.source import HubOptions as ForLibraryUsers

    assert ForLibraryUsers is HubOptions


def test_an_index_that_disagrees_is_read_again_to_say_which_names(hub):
    """The index is read as it arrives, keeping per file what it lists, not its map; when the headers
    disagree (here the norm listed in the first shard, and a tensor no shard holds), it is read once more,
    map and all, and each name is said: the 64 requests of a clean run, and one more GET."""
    fake, env = hub
    files = fake.repos[REPO].files
    index = json.loads(files["model.safetensors.index.json"])
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00061.safetensors"
    index["weight_map"]["model.layers.0.mlp.ghost.weight"] = "model-00001-of-00061.safetensors"
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    code, report, _ = verify_repo(env)
    assert code == 1
    assert [(m["tensor"], m["kind"]) for m in report["mismatches"]] == [
        ("model.norm.weight", "index"),
        ("model.layers.0.mlp.ghost.weight", "index"),
    ]
    assert report["mismatches"][0]["found"] == (
        "in model-00061-of-00061.safetensors, listed in model-00001-of-00061.safetensors"
    )
    index_gets = [p for m, p, _ in fake.requests if p.endswith("model.safetensors.index.json")]
    assert len(fake.requests) == 2 + 1 + 61 + 1 and len(index_gets) == 2
