"""Hostile input: configs, checkpoints, Hub servers, paths and environments that kimicount did not make.

The promise, for every case here: bad input gives one line on stderr and exit 2 (never a traceback,
a hang, unbounded memory, or a read outside what the user named); Ctrl-C gives exit 130 at once; a
closed stdout pipe ends the run quietly. One test per class of failure of issue 12, numbered as there.
Hangs are tested with short deadlines (a trickling fake server), and subprocess time limits that only a
hang reaches.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .checkpoints import write_header_only
from .fakehub import FakeHub, trickle
from .helpers import FIXTURES, KIMI_K2, run_kimicount

INDEX = "model.safetensors.index.json"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
K2_CONFIG = (KIMI_K2 / "config.json").read_bytes()
NORM = {"model.norm.weight": ((7168,), "BF16")}


def one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The run failed as bad input should: exit 2, nothing on stdout, its last stderr line the error
    (before it, only the retries it reported), no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert result.stdout == ""
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    assert lines and lines[-1].startswith("kimicount: error: "), result.stderr[-2000:]
    assert all(line.startswith("kimicount: ") for line in lines), result.stderr[-2000:]
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


def checkpoint_folder(folder: Path, index: dict | None = None, shards: dict | None = None) -> Path:
    """A folder with Kimi K2's config.json, header-only shards and (optionally) an index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes(K2_CONFIG)
    for name, tensors in (shards or {}).items():
        write_header_only(folder / name, tensors)
    if index is not None:
        (folder / INDEX).write_text(json.dumps(index))
    return folder


@pytest.fixture
def threaded_httpserver():
    """A server that answers requests side by side, as the Hub does: with pytest-httpserver's default
    (one request at a time), a trickling shard would hold back the other shard read in parallel, and which
    of them stalls would depend on which request the server took first."""
    from pytest_httpserver import HTTPServer

    server = HTTPServer(threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest.fixture
def hub(threaded_httpserver, tmp_path):
    """A fake Hub with org/tiny: Kimi K2's config, and an index naming two header-only shards."""
    shards = {
        "model-00001-of-00002.safetensors": {"model.embed_tokens.weight": ((163840, 7168), "BF16")},
        "model-00002-of-00002.safetensors": NORM,
    }
    files: dict[str, bytes | Path] = {"config.json": K2_CONFIG}
    for name, tensors in shards.items():
        write_header_only(tmp_path / name, tensors)
        files[name] = tmp_path / name
    files[INDEX] = json.dumps({"weight_map": {t: f for f, ts in shards.items() for t in ts}}).encode()
    fake = FakeHub()
    fake.add_repo("org/tiny", files, commit=COMMIT)
    env = fake.client_env(threaded_httpserver, tmp_path)
    return fake, env


def at_path(suffix: str, response):
    """An override answering requests whose path ends with `suffix` (the rest as the Hub does)."""
    return lambda request: response(request) if request.path.endswith(suffix) else None


# --- 1. no file outside the checkpoint ------------------------------------------------------------


@pytest.mark.parametrize("name", ["../outside.safetensors", "{tmp}/outside.safetensors", "a/./b.safetensors"])
def test_1_a_local_index_cannot_name_a_file_outside_the_folder(tmp_path, name):
    write_header_only(tmp_path / "outside.safetensors", NORM)
    name = name.format(tmp=tmp_path)
    folder = checkpoint_folder(tmp_path / "ckpt", index={"weight_map": {"model.norm.weight": name}})
    result = run_kimicount("verify", "--path", str(folder))
    one_line_error(result, json.dumps(name), "not a plain relative name inside the checkpoint")


def test_1_a_hub_index_cannot_name_another_repos_file(hub):
    fake, env = hub
    fake.add_repo(
        "other/repo", {"model.safetensors": fake.repos["org/tiny"].files["model-00002-of-00002.safetensors"]}
    )
    fake.repos["org/tiny"].files[INDEX] = json.dumps(
        {"weight_map": {"model.norm.weight": "../../../../other/repo/resolve/main/model.safetensors"}}
    ).encode()
    result = run_kimicount("verify", "--repo", "org/tiny", "--revision", COMMIT, env=env)
    one_line_error(result, "not a plain relative name inside the checkpoint")
    assert not [path for _, path, _ in fake.requests if path.startswith("/other/")]


def files_outside(tmp_path: Path, hf_home: Path) -> set[Path]:
    return {path for path in tmp_path.rglob("*") if hf_home not in path.parents and path != hf_home}


ETAG_EXPECTED = "is not an ETag (letters, digits, '-' and '_', quoted)"
COMMIT_EXPECTED = "is not a commit hash (40 hex digits)"


@pytest.mark.parametrize(
    "status, header, value, expected",
    [
        (200, "ETag", '"../../../../escape2"', ETAG_EXPECTED),  # the blob: blobs/<etag>
        (200, "X-Linked-Etag", '"../../../../escape3"', ETAG_EXPECTED),
        # the snapshot: snapshots/<commit>/config.json
        (200, "X-Repo-Commit", "../../../../../escape", COMMIT_EXPECTED),
        (200, "X-Repo-Commit", "main", COMMIT_EXPECTED),  # a plain name, but no commit
        (404, "X-Repo-Commit", "../../../../escape4", COMMIT_EXPECTED),  # noted in .no_exist/<commit>/
    ],
)
def test_1_the_hubs_answer_cannot_name_a_path_outside_the_cache(
    hub, tmp_path, status, header, value, expected
):
    from werkzeug import Response

    fake, env = hub
    before = files_outside(tmp_path, tmp_path / "hf")

    def answer(request):
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{"e" * 64}"', header: value}
        if status == 404:
            headers |= {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"}
        response = Response(b"" if request.method == "HEAD" else K2_CONFIG, status=status, headers=headers)
        response.headers["Content-Length"] = str(len(K2_CONFIG))
        response.automatically_set_content_length = False
        return response

    fake.override = at_path("/config.json", answer)
    result = run_kimicount("params", "--repo", "org/tiny", env=env)
    one_line_error(result, f"org/tiny@main: config.json: the server's {header} {value!r} {expected}")
    assert files_outside(tmp_path, tmp_path / "hf") == before


# --- 2. config sizes bounded before anything is built from them ------------------------------------


def config_with(tmp_path: Path, changes: dict, base: Path = KIMI_K2 / "config.json") -> str:
    config = json.loads(base.read_text())
    target = config.get("text_config", config)
    for key, value in changes.items():
        if key.startswith("vision_config."):
            config["vision_config"][key.split(".", 1)[1]] = value
        else:
            target[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize(
    "command, changes, needle",
    [
        (["params"], {"num_hidden_layers": 10**9}, "key 'num_hidden_layers': 1,000,000,000 layers"),
        (
            ["params", "--json"],
            {"n_routed_experts": 2**40},
            "key 'n_routed_experts': 67,070,209,294,336 routed experts in 61 layers",
        ),
        (["kv-cache"], {"n_routed_experts": 2**200}, "key 'n_routed_experts': a number of 61 digits is over"),
        (["params"], {"hidden_size": 2**64}, "key 'hidden_size': 18,446,744,073,709,551,616 is over"),
        (["kv-cache"], {"max_position_embeddings": 2**64}, "key 'max_position_embeddings'"),
        (
            ["kv-cache", "--tp", "3"],
            {"num_attention_heads": 2**61},
            "use a divisor of 2,305,843,009,213,693,952",
        ),
    ],
)
def test_2_config_sizes_are_bounded(tmp_path, command, changes, needle):
    result = run_kimicount(*command, "--config", config_with(tmp_path, changes), timeout=60)
    one_line_error(result, needle)


@pytest.mark.parametrize("command", ["params", "verify"])
def test_2_a_tensor_the_config_makes_too_large_is_refused(tmp_path, command):
    # 2^62 heads × qk_head_dim 192: q_b_proj has 885,443,715,538,058,477,568 rows, each size alone bounded
    path = config_with(tmp_path, {"num_attention_heads": 2**62})
    folder = checkpoint_folder(tmp_path / "ckpt", shards={"model.safetensors": NORM})
    args = ["--config", path] if command == "params" else ["--path", str(folder), "--config", path]
    one_line_error(
        run_kimicount(command, *args),
        "q_b_proj.weight [885,443,715,538,058,477,568, 1,536], a dimension over 9,223,372,036,854,775,807",
    )
    # the element count: 2^31 × 2^32 rows and columns each fit, their product does not
    path = config_with(tmp_path, {"vocab_size": 2**31, "hidden_size": 2**32})
    one_line_error(
        run_kimicount("params", "--config", path),
        "model.embed_tokens.weight [2,147,483,648, 4,294,967,296], the element count over",
    )


def test_2_a_kv_cache_entry_the_config_makes_too_large_is_refused(tmp_path):
    # 2^62 heads × (128 + 64 + 192) values: 1,770,887,431,076,116,955,136 per token per layer in flash's
    # layout, each config size alone bounded
    path = config_with(tmp_path, {"num_attention_heads": 2**62})
    one_line_error(
        run_kimicount("kv-cache", "--config", path, "--layout", "latent"),
        "num_attention_heads × (qk_nope_head_dim + qk_rope_head_dim + max(qk_head_dim, v_head_dim)) is "
        "4611686018427387904 × (128 + 64 + 192) values per token and layer, over 9,223,372,036,854,775,807",
    )
    # the latent alone: 2^63 − 1 + 64 values
    path = config_with(tmp_path, {"kv_lora_rank": 2**63 - 1})
    one_line_error(
        run_kimicount("kv-cache", "--config", path, "--layout", "naive"),
        "(kv_lora_rank + qk_rope_head_dim) is (9223372036854775807 + 64) values per token and layer",
    )


def test_2_vision_layers_are_bounded(tmp_path):
    path = config_with(
        tmp_path, {"vision_config.vt_num_hidden_layers": 10**9}, FIXTURES / "kimi-k2.5/config.json"
    )
    one_line_error(run_kimicount("params", "--config", path, timeout=60), "key 'vt_num_hidden_layers'")


def test_2_a_huge_but_possible_size_is_counted_without_a_loop_over_it(tmp_path):
    # hidden_size 10^12 fits a tensor dimension; FP8 storage charges scale rows per 128-row block
    # (7.8 billion blocks here), which must be counted, not enumerated.
    result = run_kimicount(
        "params", "--json", "--config", config_with(tmp_path, {"hidden_size": 10**12}), timeout=60
    )
    assert result.returncode == 0, result.stderr
    embedding = json.loads(result.stdout)["tree"]["children"][0]
    assert embedding["params"] == 163_840 * 10**12  # vocab_size × hidden_size


# --- 3. compressed-tensors `re:` patterns -------------------------------------------------------------


def k25_ignoring(tmp_path: Path, pattern: str) -> str:
    config = json.loads((FIXTURES / "kimi-k2.5/config.json").read_text())
    config["text_config"]["quantization_config"]["ignore"] = ["lm_head", pattern]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_3_a_pattern_that_does_not_compile(tmp_path):
    result = run_kimicount("params", "--config", k25_ignoring(tmp_path, "re:("))
    one_line_error(result, "key 'ignore'", '"re:(" is not a regular expression')


def test_3_a_pattern_that_backtracks_without_end_is_cut_short(tmp_path):
    # Nested repeats: every way to cut a module name into runs, and each run into runs again, 2^33 ways
    # for the first Linear asked about (model.layers.0.self_attn.q_a_proj), which it never finishes.
    # (Not "(\w|\w\w|\.)+!": its 24 million cuts of kv_a_proj_with_mqa take about 5.7 s, so a fast
    # moment finished that name within the deadline and stopped at the next.)
    start = time.monotonic()
    result = run_kimicount("params", "--config", k25_ignoring(tmp_path, r"re:((\w|\.)+)+!"), timeout=60)
    one_line_error(
        result,
        "key 'ignore'",
        "take more than 5 s to match the module names (stopped at 'model.layers.0.self_attn.q_a_proj')",
    )
    assert time.monotonic() - start < 30


# --- 4. one deadline for the Hub, and Ctrl-C at once ------------------------------------------------


def test_4_a_trickling_config_ends_at_the_deadline(hub):
    fake, env = hub
    fake.override = at_path("/config.json", lambda r: trickle(K2_CONFIG) if r.method == "GET" else None)
    start = time.monotonic()
    result = run_kimicount("params", "--repo", "org/tiny", env={**env, "KIMICOUNT_TIMEOUT": "3"}, timeout=45)
    line = one_line_error(result, "org/tiny@main: gave up after 3 s", "fetching config.json")
    assert time.monotonic() - start < 20, line


def test_4_a_server_that_never_answers(tmp_path):
    # Accepts connections (the kernel's backlog does) and never says a word.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        env = {"HF_ENDPOINT": f"http://127.0.0.1:{server.getsockname()[1]}", "HF_HOME": str(tmp_path / "hf")}
        start = time.monotonic()
        result = run_kimicount("verify", "--repo", "org/x", "--timeout", "2", env=env, timeout=45)
    one_line_error(result, "org/x@main: gave up after 2 s")
    assert time.monotonic() - start < 20


def test_4_the_deadline_is_read_only_for_the_hub(tmp_path):
    warning = (
        "kimicount: warning: --timeout has no effect without --repo (it bounds what is asked of the Hub)\n"
    )
    result = run_kimicount("params", "--json", "--timeout", "5")
    assert result.returncode == 0 and result.stderr == warning, result.stderr
    assert json.loads(result.stdout)["total"] == 1_026_408_232_448  # Kimi K2, as DESIGN.md gives it
    folder = checkpoint_folder(tmp_path / "ckpt", shards={"model.safetensors": NORM})
    result = run_kimicount("verify", "--path", str(folder), "--timeout", "abc")
    assert result.returncode == 1 and result.stderr == warning, result.stderr  # a mismatch: most is missing
    # a variable set for other runs is no business of one that asks nothing of the Hub
    result = run_kimicount("params", "--json", env={"KIMICOUNT_TIMEOUT": "abc"})
    assert result.returncode == 0 and result.stderr == "", result.stderr


@pytest.mark.parametrize(
    "option, variable, needle",
    [
        ([], "-1", "KIMICOUNT_TIMEOUT=-1: expected a positive number of seconds"),
        ([], "abc", "KIMICOUNT_TIMEOUT=abc: expected a number of seconds"),
        (["--timeout", "-1"], "abc", "--timeout -1: expected a positive number of seconds"),
        (["--timeout", "nan"], None, "--timeout nan: expected a positive number of seconds"),
    ],
)
def test_4_a_bad_deadline_is_named_where_it_was_given(hub, option, variable, needle):
    fake, env = hub
    env = env if variable is None else {**env, "KIMICOUNT_TIMEOUT": variable}
    one_line_error(run_kimicount("params", "--repo", "org/tiny", *option, env=env), needle)
    assert fake.requests == []


def interrupt_when(command: list[str], env: dict[str, str], ready) -> tuple[subprocess.Popen, float]:
    """Start kimicount, send SIGINT once `ready()` is true; returns the process (ended) and the
    seconds it took to end after the signal."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kimicount", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
        # as a terminal's Ctrl-C reaches it (a shell may start background jobs with SIGINT ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 - nothing else runs
    )
    deadline = time.monotonic() + 30
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready(), "the run never reached the stuck request"
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("Ctrl-C did not end the run")
    return process, time.monotonic() - sent


def test_4_ctrl_c_ends_a_run_stuck_in_a_worker_thread(hub):
    fake, env = hub
    stuck = "/model-00002-of-00002.safetensors"
    fake.override = at_path(
        stuck, lambda r: trickle(b"x" * 10_000, status=206, headers={"Content-Range": "bytes 0-9999/99999"})
    )
    process, seconds = interrupt_when(
        ["verify", "--repo", "org/tiny", "--revision", COMMIT],
        env,
        lambda: any(path.endswith(stuck) for _, path, _ in fake.requests),
    )
    assert process.returncode == 130 and seconds < 5
    assert process.stderr.read() == "kimicount: interrupted\n"


# --- 4b. every Hub failure ends in a time a user can predict (issue 19) ----------------------------------
#
# Each request must make progress: no byte in KIMICOUNT_SPEED_TIME seconds, or fewer than
# KIMICOUNT_SPEED_LIMIT bytes a second over that time, and the try has failed; a request is tried
# KIMICOUNT_TRIES times in all, each retry said. The defaults (10 s, 1,024 bytes/s, 3 tries) end any of
# these within 3 × 10 s + 1 s + 2 s of back-off = 33 s; the tests make the limits short.

QUICK = {"KIMICOUNT_SPEED_TIME": "1", "KIMICOUNT_TRIES": "2"}


@contextmanager
def raw_server(answer) -> Iterator[str]:
    """An endpoint on 127.0.0.1 that hands every connection to `answer(connection)` in a daemon thread:
    for what no HTTP server does on purpose (hang up, stall mid-body)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def read_request(connection: socket.socket) -> str:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.decode("latin-1")


def timed(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    result = run_kimicount(*args, env=env, timeout=120)
    return result, time.monotonic() - start


def test_4b_a_server_that_hangs_up_ends_after_three_tries_by_default(tmp_path):
    def hang_up(connection: socket.socket) -> None:
        read_request(connection)
        connection.close()

    with raw_server(hang_up) as endpoint:
        env = {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf")}
        result, seconds = timed("params", "--repo", "org/x", env=env)
    url = f"{endpoint}/org/x/resolve/main/config.json"
    line = one_line_error(result, f"org/x@main: HEAD {url}: ", "gave up after 3 tries")
    retries = result.stderr.splitlines()[:-1]
    assert [r.rpartition("; ")[2] for r in retries] == ["try 2 of 3", "try 3 of 3"], result.stderr
    assert seconds < 60, (seconds, line)


def test_4b_a_server_that_never_answers_ends_without_the_deadline(tmp_path):
    # Accepts connections (the kernel's backlog does) and never says a word; no --timeout.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
        env = {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf"), **QUICK}
        result, seconds = timed("verify", "--repo", "org/x", env=env)
    one_line_error(result, "org/x@main: ", "no byte in 1 s", "gave up after 2 tries")
    assert seconds < 20


def test_4b_a_trickling_shard_fails_by_its_rate(hub):
    fake, env = hub
    stuck = "/model-00002-of-00002.safetensors"
    fake.override = at_path(
        stuck,
        lambda r: trickle(b"x" * 100, status=206, headers={"Content-Range": "bytes 0-99/99999"}, every=0.2),
    )
    result, seconds = timed("verify", "--repo", "org/tiny", "--revision", COMMIT, env={**env, **QUICK})
    url = f"{env['HF_ENDPOINT']}/org/tiny/resolve/{COMMIT}{stuck}"
    one_line_error(result, f"GET {url}: ", "under 1,024 bytes/s for 1 s", "gave up after 2 tries")
    assert result.stderr.count("; try 2 of 2\n") == 1
    assert seconds < 20


def test_4b_a_500_on_one_shard(hub):
    from werkzeug import Response

    fake, env = hub
    broken = "/model-00002-of-00002.safetensors"
    fake.override = at_path(broken, lambda r: Response("down", status=500))
    result, seconds = timed("verify", "--repo", "org/tiny", "--revision", COMMIT, env={**env, **QUICK})
    url = f"{env['HF_ENDPOINT']}/org/tiny/resolve/{COMMIT}{broken}"
    one_line_error(result, f"GET {url}: HTTP 500 INTERNAL SERVER ERROR; gave up after 2 tries")
    assert sum(path == f"/org/tiny/resolve/{COMMIT}{broken}" for _, path, _ in fake.requests) == 2
    assert seconds < 20


def test_4b_a_shard_that_stalls_after_8_bytes_names_the_url(hub):
    # Once "RuntimeError: generator didn't stop after throw()", exit 3: the retry of a body that failed
    # half read.
    fake, env = hub
    stuck = "/model-00002-of-00002.safetensors"
    shard = fake.repos["org/tiny"].files[stuck[1:]].read_bytes()
    release = threading.Event()

    def eight_bytes_then_nothing(request):
        from werkzeug import Response

        def body() -> Iterator[bytes]:
            yield shard[:8]
            release.wait(30)

        headers = {"Content-Range": f"bytes 0-{len(shard) - 1}/{len(shard)}"}
        response = Response(body(), status=206, headers=headers, direct_passthrough=True)
        response.headers["Content-Length"] = str(len(shard))
        return response

    fake.override = at_path(stuck, eight_bytes_then_nothing)
    try:
        result, seconds = timed("verify", "--repo", "org/tiny", "--revision", COMMIT, env={**env, **QUICK})
    finally:
        release.set()
    url = f"{env['HF_ENDPOINT']}/org/tiny/resolve/{COMMIT}{stuck}"
    one_line_error(result, f"GET {url}: no byte in 1 s", "gave up after")
    assert seconds < 30


def test_4b_the_deadline_still_bounds_the_whole_command(hub):
    # Retries that would go on for minutes (100 tries of 2 s) end at --timeout.
    fake, env = hub
    fake.override = at_path("/config.json", lambda r: trickle(K2_CONFIG) if r.method == "GET" else None)
    env = {**env, "KIMICOUNT_SPEED_TIME": "2", "KIMICOUNT_TRIES": "100"}
    result, seconds = timed("params", "--repo", "org/tiny", "--timeout", "4", env=env)
    one_line_error(result, "org/tiny@main: gave up after 4 s")
    assert seconds < 20


@pytest.mark.parametrize(
    "variable, value, needle",
    [
        ("KIMICOUNT_SPEED_TIME", "nan", "KIMICOUNT_SPEED_TIME=nan: expected a positive number of seconds"),
        ("KIMICOUNT_SPEED_TIME", "0", "KIMICOUNT_SPEED_TIME=0: expected a positive number of seconds"),
        ("KIMICOUNT_TRIES", "0", "KIMICOUNT_TRIES=0: expected a number of tries from 1 to 100"),
        ("KIMICOUNT_SPEED_LIMIT", "-1", "KIMICOUNT_SPEED_LIMIT=-1: expected a number of bytes a second"),
    ],
)
def test_4b_a_bad_limit_is_named(hub, variable, value, needle):
    fake, env = hub
    one_line_error(run_kimicount("params", "--repo", "org/tiny", env={**env, variable: value}), needle)
    assert fake.requests == []


# --- 5. sizes capped before reading --------------------------------------------------------------------


def peak_rss(command: list[str]) -> tuple[int, int, str]:
    """Exit code, peak resident memory [bytes] and stderr of a kimicount run. Measured from a small
    Python process that starts it: a child forked straight from pytest would count pytest's pages."""
    measure = (
        "import resource, subprocess, sys\n"
        "run = subprocess.run([sys.executable, '-m', 'kimicount', *sys.argv[1:]], stdout=subprocess.DEVNULL,"
        " stderr=subprocess.PIPE, text=True, check=False)\n"
        "print(run.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
        "print(run.stderr, end='')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", measure, *command], capture_output=True, text=True, timeout=120, check=False
    )
    first, _, stderr = result.stdout.partition("\n")
    code, rss = map(int, first.split())
    return code, rss, stderr


def test_5_a_huge_local_index_is_read_in_bounded_memory_and_a_huge_config_refused(tmp_path):
    folder = checkpoint_folder(tmp_path / "ckpt")
    with (folder / INDEX).open("wb") as index:
        index.truncate(600 * 2**20)  # sparse: costs no disk; its first byte is not JSON
    code, rss, stderr = peak_rss(["verify", "--path", str(folder)])
    assert code == 2 and "index.json: not valid JSON (Expecting value at line 1 column 1)" in stderr, stderr
    assert rss < 200 * 2**20, rss
    with (tmp_path / "big.json").open("wb") as config:
        config.truncate(600 * 2**20)
    code, rss, stderr = peak_rss(["params", "--config", str(tmp_path / "big.json")])
    assert code == 2 and "more than any config.json" in stderr and rss < 200 * 2**20, (stderr, rss)


def padded_index(padding: int) -> bytes:
    """A valid index naming one shard, `padding` bytes of whitespace between its two keys (JSON allows
    any): larger than the 100 MB an index was capped at before it was read as a stream."""
    return (
        b'{"metadata": {"total_size": 14336},'
        + b" " * padding
        + b'"weight_map": {"model.norm.weight": "model-00001-of-00001.safetensors"}}'
    )


def test_5_an_index_over_100_mb_is_read_as_a_stream(tmp_path):
    """Refused before it was read ("more than any index (100,000,000 at most)"), it is read now, a MiB at
    a time: the run checks the one shard it names (Kimi K2's norm, of all its tensors: exit 1)."""
    folder = checkpoint_folder(tmp_path / "ckpt", shards={"model-00001-of-00001.safetensors": NORM})
    (folder / INDEX).write_bytes(padded_index(120 * 2**20))
    code, rss, stderr = peak_rss(["verify", "--path", str(folder), "--json"])
    assert code == 1 and stderr == "", stderr
    assert rss < 200 * 2**20, rss


def test_5_a_hub_index_is_read_as_it_arrives(hub):
    """An index over the old cap on the Hub is read as it arrives; a server that says more than it sends
    is a failed transfer, retried as huggingface_hub retries one, and said in one line."""
    from werkzeug import Response

    fake, env = hub
    fake.repos["org/tiny"].files[INDEX] = padded_index(110 * 2**20)
    fake.repos["org/tiny"].files["model-00001-of-00001.safetensors"] = fake.repos["org/tiny"].files.pop(
        "model-00002-of-00002.safetensors"
    )
    result = run_kimicount(
        "verify", "--repo", "org/tiny", "--revision", COMMIT, "--json", env=env, timeout=120
    )
    assert result.returncode == 1 and json.loads(result.stdout)["files"] == 1, result.stderr[-2000:]

    def lying(request):  # says 600 MB; sends two bytes
        response = Response(b"{}", headers={"X-Repo-Commit": COMMIT})
        response.headers["Content-Length"] = str(600 * 2**20)
        response.automatically_set_content_length = False
        return response

    fake.override = at_path(INDEX, lying)
    result = run_kimicount("verify", "--repo", "org/tiny", "--revision", COMMIT, env=env, timeout=60)
    one_line_error(result, "received 2 bytes, expected 629145600", "gave up after 3 tries")


def cache_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def test_5_a_hub_config_said_too_large_is_not_downloaded(hub, tmp_path):
    fake, env = hub
    fake.repos["org/tiny"].files["config.json"] = b" " * 17 * 2**20 + K2_CONFIG  # valid JSON, 17 MiB
    result = run_kimicount("params", "--repo", "org/tiny", env=env, timeout=60)
    size = 17 * 2**20 + len(K2_CONFIG)
    one_line_error(result, f"config.json: {size:,} bytes, more than any config.json (16,777,216 at most)")
    assert ("GET", "/org/tiny/resolve/main/config.json", None) not in fake.requests
    assert cache_bytes(tmp_path / "hf") < 2**20


# A library user's own client, set before kimicount runs: its header on every request, and kimicount's
# size cap on the config (which only its wrapping of the client's transport enforces) all the same.
LIBRARY_USER = """
from huggingface_hub.utils import get_session, set_client_factory
Client = type(get_session())
set_client_factory(lambda: Client(headers={"X-Library-User": "yes"}, follow_redirects=True))
from kimicount.errors import SourceError
from kimicount.options import HubOptions
from kimicount.source import load_spec
try:
    load_spec(repo="org/tiny", hub_options=HubOptions(timeout=30))
except SourceError as error:
    print(error)
"""


def test_5_the_cap_holds_on_a_client_factory_the_library_user_set(hub, tmp_path):
    from werkzeug import Request

    fake, env = hub
    fake.repos["org/tiny"].files["config.json"] = b" " * 17 * 2**20 + K2_CONFIG
    seen: list[str | None] = []

    def note(request: Request) -> None:
        seen.append(request.headers.get("X-Library-User"))

    fake.override = lambda request: note(request)
    result = subprocess.run(
        [sys.executable, "-c", LIBRARY_USER],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )
    size = 17 * 2**20 + len(K2_CONFIG)
    assert result.stdout.endswith(
        f"config.json: {size:,} bytes, more than any config.json (16,777,216 at most)\n"
    )
    assert seen and set(seen) == {"yes"}  # every request went through the user's client
    assert ("GET", "/org/tiny/resolve/main/config.json", None) not in fake.requests
    assert cache_bytes(tmp_path / "hf") < 2**20


def test_5_a_hub_config_larger_than_it_said_is_cut_off(hub, tmp_path):
    from werkzeug import Response

    fake, env = hub

    def small_at_head(request):  # the HEAD says a few KB; the GET sends 40 MiB without saying so
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{"e" * 64}"'}
        if request.method == "HEAD":
            response = Response(b"", headers=headers)
            response.headers["Content-Length"] = str(len(K2_CONFIG))
            response.automatically_set_content_length = False
            return response
        return Response((b" " * 2**20 for _ in range(40)), headers=headers, direct_passthrough=True)

    fake.override = at_path("/config.json", small_at_head)
    result = run_kimicount("params", "--repo", "org/tiny", env=env, timeout=60)
    one_line_error(result, "config.json: more than 16,777,216 bytes, more than any config.json")
    assert cache_bytes(tmp_path / "hf") <= 17 * 2**20


# --- 6. a Hub index of very many shards is sized in one pass ------------------------------------------


def test_6_an_index_of_40000_shards_is_sized_in_one_pass(hub):
    fake, env = hub
    weight_map = {f"model.layers.{i}.x.weight": f"shard-{i:05d}.safetensors" for i in range(40_000)}
    fake.repos["org/tiny"].files[INDEX] = json.dumps({"weight_map": weight_map}).encode()
    start = time.monotonic()
    result = run_kimicount("verify", "--repo", "org/tiny", "--revision", COMMIT, env=env, timeout=60)
    one_line_error(result, "no file 'shard-")  # no shard is there: the first read says so
    assert time.monotonic() - start < 30


# --- 7. what is not a regular file is not opened ----------------------------------------------------------


def test_7_a_fifo_named_like_a_shard_or_a_config_is_not_opened(tmp_path):
    folder = checkpoint_folder(tmp_path / "ckpt")
    os.mkfifo(folder / "model-00001-of-00001.safetensors")
    one_line_error(
        run_kimicount("verify", "--path", str(folder), timeout=30), "no model.safetensors.index.json"
    )
    os.mkfifo(tmp_path / "config.json")
    one_line_error(
        run_kimicount("params", "--config", str(tmp_path / "config.json"), timeout=30), "not a regular file"
    )


def make_irregular(path: Path, kind: str) -> str:
    """`path` made a dangling link, a FIFO or a folder; returns what reading it says."""
    if kind == "dangling link":
        path.symlink_to(path.parent / "gone")
        return "which is not there"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    return "not a regular file"


@pytest.mark.parametrize("kind", ["dangling link", "fifo", "folder"])
def test_7_an_index_config_or_single_file_that_is_no_regular_file_is_said(tmp_path, kind):
    # Passed over, the index would go unchecked: the single file beside it would be verified alone.
    folder = checkpoint_folder(tmp_path / "ckpt", shards={"model.safetensors": NORM})
    needle = make_irregular(folder / INDEX, kind)
    one_line_error(run_kimicount("verify", "--path", str(folder), timeout=30), f"{folder / INDEX}: ", needle)
    folder = checkpoint_folder(tmp_path / "ckpt2", shards={"model.safetensors": NORM})
    (folder / "config.json").unlink()
    needle = make_irregular(folder / "config.json", kind)
    if kind == "folder":  # read as --config reads a folder: the config.json inside it
        needle = "config.json/config.json: no such file"
    one_line_error(run_kimicount("verify", "--path", str(folder), timeout=30), "config.json: ", needle)
    folder = checkpoint_folder(tmp_path / "ckpt3")
    needle = make_irregular(folder / "model.safetensors", kind)
    one_line_error(run_kimicount("verify", "--path", str(folder), timeout=30), "model.safetensors: ")


# --- 8–10. what a Hub server says wrong -------------------------------------------------------------------


def test_8_a_redirect_loop(hub):
    from werkzeug import Response

    fake, env = hub
    fake.override = at_path("/config.json", lambda r: Response("", status=302, headers={"Location": r.path}))
    one_line_error(run_kimicount("params", "--repo", "org/tiny", env=env, timeout=60), "org/tiny@main")


def test_8_an_answer_that_cannot_be_decoded(hub):
    from werkzeug import Response

    fake, env = hub

    def gzip_that_is_not(request):
        if request.method != "GET":
            return None
        return Response(
            K2_CONFIG, headers={"Content-Encoding": "gzip", "X-Repo-Commit": COMMIT, "ETag": '"e"'}
        )

    fake.override = at_path("/config.json", gzip_that_is_not)
    one_line_error(
        run_kimicount("params", "--repo", "org/tiny", env=env, timeout=60), "config.json", "decoded"
    )


def test_8_a_file_name_of_70000_characters(hub, tmp_path):
    fake, env = hub
    name = "x" * 70_000 + ".safetensors"
    fake.repos["org/tiny"].files[INDEX] = json.dumps({"weight_map": {"model.norm.weight": name}}).encode()
    needle = "a part of it is 70,012 bytes long; a file name has at most 255"
    one_line_error(run_kimicount("verify", "--repo", "org/tiny", "--revision", COMMIT, env=env), needle)
    folder = checkpoint_folder(tmp_path / "ckpt", index={"weight_map": {"model.norm.weight": name}})
    one_line_error(run_kimicount("verify", "--path", str(folder)), needle)


@pytest.mark.parametrize("total", ["9" * 5000, "²", "*", "-1"])
def test_9_a_content_range_that_is_not_a_small_decimal_number(hub, total):
    from werkzeug import Response

    fake, env = hub
    shard = fake.repos["org/tiny"].files["model-00002-of-00002.safetensors"]
    fake.override = at_path(
        "/model-00002-of-00002.safetensors",
        lambda r: Response(
            shard.read_bytes()[:100], status=206, headers={"Content-Range": f"bytes 0-99/{total}"}
        ),
    )
    result = run_kimicount("verify", "--repo", "org/tiny", "--revision", COMMIT, env=env)
    one_line_error(result, "model-00002-of-00002.safetensors: the server's Content-Range")


# --- 11–13. numbers and names past what Python and file systems take --------------------------------------


def test_11_integers_of_more_than_4300_digits(tmp_path, hub):
    huge = "1" + "0" * 5000
    config = K2_CONFIG.decode().replace('"hidden_size": 7168', f'"hidden_size": {huge}')
    (tmp_path / "c.json").write_text(config)
    one_line_error(run_kimicount("params", "--config", str(tmp_path / "c.json")), "more than 4,300 digits")
    folder = checkpoint_folder(tmp_path / "ckpt", shards={"a.safetensors": NORM})
    (folder / INDEX).write_text(
        f'{{"metadata": {{"total_size": {huge}}}, "weight_map": {{"model.norm.weight": "a.safetensors"}}}}'
    )
    one_line_error(run_kimicount("verify", "--path", str(folder)), "more than 4,300 digits")
    single = checkpoint_folder(tmp_path / "single")
    raw = f'{{"x": {{"dtype": "BF16", "shape": [{huge}], "data_offsets": [0, 2]}}}}'.encode()
    write_header_only(single / "model.safetensors", {}, raw_header=raw)
    one_line_error(run_kimicount("verify", "--path", str(single)), "more than 4,300 digits")


def test_12_a_shape_too_large_to_print(tmp_path):
    big = "1" + "0" * 4000
    raw = f'{{"x": {{"dtype": "BF16", "shape": [{big}, {big}], "data_offsets": [0, 2]}}}}'.encode()
    folder = checkpoint_folder(tmp_path / "ckpt")
    write_header_only(folder / "model.safetensors", {}, raw_header=raw)
    result = run_kimicount("verify", "--path", str(folder))
    one_line_error(result, "tensor 'x': shape of more elements than safetensors' u64 offsets can hold")


def test_12_a_shape_of_100000_huge_dims_is_refused_at_once(tmp_path):
    # The product of 100,000 dims of 2^62 has 6.2 million bits: multiplying it out takes minutes.
    dims = ", ".join([str(2**62)] * 100_000)
    raw = (
        f'{{"x": {{"dtype": "BF16", "shape": [{dims}], "data_offsets": [0, 2]}}, '
        f'"y": {{"dtype": "BF16", "shape": [{dims}, 3], "data_offsets": [2, 4]}}}}'
    ).encode()
    folder = checkpoint_folder(tmp_path / "ckpt")
    write_header_only(folder / "model.safetensors", {}, raw_header=raw)
    start = time.monotonic()
    result = run_kimicount("verify", "--path", str(folder), timeout=60)
    one_line_error(result, "tensor 'x': shape of more elements than safetensors' u64 offsets can hold")
    assert time.monotonic() - start < 20


@pytest.mark.parametrize(
    "entry, needle",
    [
        (  # 2^80 elements: no u64 byte offset reaches them
            {"dtype": "BF16", "shape": [2**40, 2**40], "data_offsets": [0, 2**81]},
            "tensor 'x': shape of more elements than safetensors' u64 offsets can hold",
        ),
        (  # 2^64 elements of 8 bytes: the shape is possible, the offsets are not
            {"dtype": "F64", "shape": [2**32, 2**32], "data_offsets": [0, 2**67]},
            "tensor 'x': data_offsets end past byte 18,446,744,073,709,551,615",
        ),
    ],
)
def test_12_a_header_past_u64_offsets_is_refused(tmp_path, entry, needle):
    header = {"x": entry}
    folder = checkpoint_folder(tmp_path / "ckpt")
    write_header_only(folder / "model.safetensors", {}, raw_header=json.dumps(header).encode())
    one_line_error(run_kimicount("verify", "--path", str(folder)), needle)


def test_13_symlink_loops_and_names_too_long(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    one_line_error(run_kimicount("params", "--config", str(tmp_path / "loop")), "loop: cannot read")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder/config.json").symlink_to(tmp_path / "folder/config.json")
    one_line_error(run_kimicount("params", "--config", str(tmp_path / "folder")), "config.json: cannot read")
    long = str(tmp_path / ("n" * 300))
    one_line_error(run_kimicount("params", "--config", long), "cannot read: File name too long")
    one_line_error(run_kimicount("verify", "--path", long), "cannot read: File name too long")


# --- 14. an output encoding without ×, – or ✓ ---------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_14_output_degrades_to_what_the_encoding_holds(tmp_path, encoding):
    folder = checkpoint_folder(tmp_path / "ckpt", shards={"model.safetensors": NORM})
    for command in (["params"], ["kv-cache"], ["verify", "--path", str(folder)], ["params", "--json"]):
        result = subprocess.run(
            [sys.executable, "-m", "kimicount", *command],
            capture_output=True,
            env={**os.environ, "PYTHONIOENCODING": encoding},
            timeout=60,
            check=False,
        )
        assert result.returncode in (0, 1), (command, result.stderr.decode(encoding))
        text = result.stdout.decode(encoding)  # encodable: what the encoding cannot hold was replaced
        if command == ["params"]:  # latin-1 has × but no en dash
            assert ("163,840 x 7,168" if encoding == "ascii" else "163,840 × 7,168") in text
            assert "layers 1-60" in text
        if command == ["params", "--json"]:  # JSON escapes instead, which read back exactly
            assert json.loads(text)["tree"]["children"][0]["calculation"] == "163,840 × 7,168"


def test_14_errors_on_stderr_degrade_too(tmp_path):
    config = config_with(tmp_path, {"hidden_size": 2**64})
    result = subprocess.run(
        [sys.executable, "-m", "kimicount", "params", "--config", config],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.endswith(b"is over 9,223,372,036,854,775,807 (2^63 - 1, the largest tensor size)\n")


# --- 15. start-up ------------------------------------------------------------------------------------------


def test_15_a_malformed_hf_endpoint(tmp_path):
    result = run_kimicount(
        "params", "--repo", "a/b", env={"HF_ENDPOINT": "http://[bad", "HF_HOME": str(tmp_path)}
    )
    one_line_error(result, "HF_ENDPOINT='http://[bad': not an http(s) URL")


@pytest.mark.parametrize(
    "variable, value",
    [
        ("HF_HUB_ETAG_TIMEOUT", "abc"),  # fails huggingface_hub's import
        ("HF_HUB_ETAG_TIMEOUT", ""),
        ("HF_HUB_DOWNLOAD_TIMEOUT", "-5"),  # fails every request it makes
        ("HF_HUB_DOWNLOAD_TIMEOUT", "1.5"),
    ],
)
def test_15_a_malformed_hf_variable(hub, variable, value):
    fake, env = hub
    result = run_kimicount("params", "--repo", "org/tiny", env={**env, variable: value})
    one_line_error(result, f"{variable}='{value}': expected a whole number of seconds, 0 or more")
    assert fake.requests == []


def test_15_ctrl_c_during_the_start_up_imports():
    # A KeyboardInterrupt raised as typer is imported: where a Ctrl-C at start-up lands.
    code = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'typer': raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "sys.argv = ['kimicount', 'params']\n"
        "import runpy; runpy.run_module('kimicount', run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stderr) == (130, "kimicount: interrupted\n")


# --- 16. exit codes that say what happened ------------------------------------------------------------------


def test_16_ctrl_c_says_so(hub):
    fake, env = hub
    fake.override = at_path("/config.json", lambda r: trickle(K2_CONFIG) if r.method == "GET" else None)
    process, seconds = interrupt_when(
        ["params", "--repo", "org/tiny"],
        env,
        lambda: ("GET", "/org/tiny/resolve/main/config.json", None) in fake.requests,
    )
    assert process.returncode == 130 and seconds < 5
    assert process.stderr.read() == "kimicount: interrupted\n"


@contextmanager
def _pipe_without_reader() -> Iterator[int]:
    """The write end of a pipe whose reader is gone before the first line is written (`… | true`)."""
    read, write = os.pipe()
    os.close(read)
    try:
        yield write
    finally:
        os.close(write)


def test_16_a_closed_stdout_pipe_is_not_a_mismatch():
    with _pipe_without_reader() as pipe:
        result = subprocess.run(
            [sys.executable, "-m", "kimicount", "params"],
            stdout=pipe,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 141 and result.stderr == "", result.stderr


@pytest.mark.parametrize("closed", ["a pipe without its reader", "no stderr at all (2>&-)"])
def test_16_a_closed_stderr_is_not_a_mismatch(closed):
    # The warning that 10,000,000 tokens is past max_position_embeddings cannot be written; the work is
    # done all the same, and the run ends with 0, not 1 (a mismatch).
    command = [sys.executable, "-m", "kimicount", "kv-cache", "--tokens", "1e7", "--json"]
    if closed == "a pipe without its reader":
        with _pipe_without_reader() as pipe:
            result = subprocess.run(
                command, stdout=subprocess.PIPE, stderr=pipe, text=True, timeout=60, check=False
            )
    else:  # the shell closes descriptor 2; Python then sets sys.stderr to None
        result = subprocess.run(
            ["sh", "-c", 'exec "$@" 2>&-', "sh", *command],
            stdout=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0
    assert json.loads(result.stdout)["tokens"] == 10_000_000


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_16_a_full_disk_on_stdout():
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "kimicount", "params"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert (
        result.returncode == 2
        and result.stderr == "kimicount: error: cannot write the output: No space left on device\n"
    )


def test_16_an_error_answer_is_not_called_unreachable(hub):
    from werkzeug import Response

    fake, env = hub
    fake.override = at_path("/config.json", lambda r: Response("no", status=501))
    line = one_line_error(run_kimicount("params", "--repo", "org/tiny", env=env), "answered HTTP 501")
    assert "cannot reach" not in line


# --- 17. torch's warnings -----------------------------------------------------------------------------------


def test_17_measure_leaves_out_torchs_numpy_warning(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "numpy.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n"
    )
    result = run_kimicount(
        "measure",
        "--tokens",
        "16",
        "--decode-steps",
        "1",
        "--json",
        env={"PYTHONPATH": str(tmp_path)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


# --- 18. what a server is asked for, quoted short (issue 26) --------------------------------------------


def test_18_a_revision_the_hub_does_not_have_is_quoted_short(hub):
    # a 5,000-character revision: the Hub's "not found" names its first 100 characters and its length
    _, env = hub
    result = run_kimicount("params", "--repo", "org/tiny", "--revision", "r" * 5000, env=env)
    line = one_line_error(result, f"revision '{'r' * 100}… (5,000 characters)' not found")
    assert len(line) < 400
