"""kimicount.gguf.reader: full-size header-only GGUFs written by gguf-py's GGUFWriter from the real
tensor listings, read back to the byte against figures llama.cpp printed for real files; and every kind
of bad header, each one error naming the file and the field."""

from __future__ import annotations

import os
import struct
from collections import Counter
from pathlib import Path

import pytest
from gguf import GGUFValueType

from kimicount.errors import CheckpointError, SourceError
from kimicount.gguf.reader import GGUFArray, read_gguf, read_header

from .gguf_files import deepseek2_metadata, read_map, write_gguf


def k2_q6_k(t) -> str:
    """llama-quantize Q6_K on Kimi K2, as its log shows: F32 stays, attn_k_b (rows of 128 do not
    divide Q6_K's blocks of 256) falls back to Q8_0, the rest Q6_K."""
    if t.dtype == "f32":
        return "F32"
    return "Q8_0" if ".attn_k_b." in t.name else "Q6_K"


def as_listed(t) -> str:
    return t.dtype.upper()


@pytest.fixture(scope="module")
def k2_q6(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "Kimi-K2-Instruct-Q6_K.gguf"
    (file,) = write_gguf(path, read_map("kimi-k2-thinking"), k2_q6_k, deepseek2_metadata("kimi-k2-thinking"),
                         tokens=163_840)  # fmt: skip
    return file


def gib(n: int) -> str:
    return f"{n / 1024**3:.2f}"


def test_kimi_k2_q6_k_file_size_is_llama_cpps(k2_q6):
    # llama.cpp's log for Kimi K2 Q6_K: "file size = 784.70 GiB (6.57 BPW)"; 365 f32, 61 q8_0, 670 q6_K
    listing = read_gguf(k2_q6)
    assert len(listing.tensors) == 1_096
    assert Counter(t.ggml_type for t in listing.tensors) == {"F32": 365, "Q8_0": 61, "Q6_K": 670}
    assert gib(listing.tensor_bytes) == "784.70"
    assert f"{listing.tensor_bytes * 8 / listing.elements:.2f}" == "6.57"
    assert listing.elements == 1_026_408_232_448  # the BF16 listing's element count
    assert listing.file_bytes == os.stat(k2_q6).st_size
    assert listing.metadata["general.architecture"] == "deepseek2"
    assert listing.metadata["deepseek2.expert_count"] == 384
    tokens = listing.metadata["tokenizer.ggml.tokens"]
    assert (tokens.item_type, tokens.length, tokens.values) == ("STRING", 163_840, None)


def test_kimi_k2_tensor_shapes_in_gguf_order(k2_q6):
    tensors = {t.name: t for t in read_gguf(k2_q6).tensors}
    k_b = tensors["blk.5.attn_k_b.weight"]
    assert (k_b.shape, k_b.ggml_type) == ((128, 512, 64), "Q8_0")
    assert k_b.nbytes == 128 * 512 * 64 // 32 * 34  # 4,194,304 elements in blocks of 32 at 34 bytes
    gate = tensors["blk.1.ffn_gate_exps.weight"]
    assert gate.shape == (7168, 2048, 384)
    assert gate.nbytes == 7168 * 2048 * 384 // 256 * 210


@pytest.mark.parametrize(
    ("model", "tensor_bytes", "elements"),
    [
        ("kimi-k2-thinking", 2_053_148_825_600, 1_026_408_232_448),
        ("deepseek-v3.1-terminus", 1_342_267_742_208, 671_026_419_200),
    ],
)
def test_bf16_listings_to_the_byte(tmp_path, model, tensor_bytes, elements):
    (file,) = write_gguf(
        tmp_path / f"{model}-BF16.gguf", read_map(model), as_listed, deepseek2_metadata(model)
    )
    listing = read_gguf(file)
    assert listing.tensor_bytes == tensor_bytes
    assert listing.elements == elements
    if model == "kimi-k2-thinking":  # 365 F32 tensors, 664,721,408 B
        f32 = [t for t in listing.tensors if t.ggml_type == "F32"]
        assert (len(f32), sum(t.nbytes for t in f32)) == (365, 664_721_408)


def test_deepseek_r1_q8_0_split_set(tmp_path):
    # llama.cpp's log for DeepSeek-R1 Q8_0: "file size = 664.29 GiB (8.50 BPW)"; R1 has V3's shapes
    files = write_gguf(tmp_path / "DeepSeek-R1-Q8_0.gguf", read_map("deepseek-v3.1-terminus"),
                       lambda t: "F32" if t.dtype == "f32" else "Q8_0", deepseek2_metadata("deepseek-v3"),
                       split_max_tensors=100)  # fmt: skip
    assert [f.name for f in files][:2] == [
        "DeepSeek-R1-Q8_0-00001-of-00011.gguf",
        "DeepSeek-R1-Q8_0-00002-of-00011.gguf",
    ]
    listing = read_gguf(files[0])
    assert listing.files == tuple(map(str, files))
    assert len(listing.tensors) == 1_086
    assert gib(listing.tensor_bytes) == "664.29"
    assert f"{listing.tensor_bytes * 8 / listing.elements:.2f}" == "8.50"
    assert listing.file_bytes == sum(os.stat(f).st_size for f in files)
    assert listing.metadata["deepseek2.attention.head_count"] == 128


def test_split_set_missing_file(tmp_path):
    files = write_gguf(tmp_path / "m.gguf", read_map("deepseek-v3.1-terminus")[:30], as_listed,
                       deepseek2_metadata("v3"), split_max_tensors=10)  # fmt: skip
    files[1].unlink()
    with pytest.raises(SourceError, match=r"m-00002-of-00003\.gguf: no such file \(split 2 of 3"):
        read_gguf(files[0])


def test_split_set_named_by_a_later_file(tmp_path):
    files = write_gguf(tmp_path / "m.gguf", read_map("deepseek-v3.1-terminus")[:30], as_listed,
                       deepseek2_metadata("v3"), split_max_tensors=10)  # fmt: skip
    with pytest.raises(
        CheckpointError, match=r"m-00002-of-00003\.gguf: key 'split.no' is 1: name the first file"
    ):
        read_gguf(files[1])


# --- bad headers, written byte by byte (GGUF v3, little-endian) ----------------------------------------


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def header(tensors: list[tuple[str, tuple[int, ...], int, int]], kv: bytes = b"", kv_count: int = 0,
           tensor_count: int | None = None, version: int = 3, magic: bytes = b"GGUF") -> bytes:  # fmt: skip
    """magic, version, counts, key-values, then (name, ne, ggml type code, offset) infos."""
    out = magic + struct.pack(
        "<IQQ", version, len(tensors) if tensor_count is None else tensor_count, kv_count
    )
    out += kv
    for name, shape, code, offset in tensors:
        out += gguf_string(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
        out += struct.pack("<IQ", code, offset)
    return out


def write(path: Path, data: bytes, size: int | None = None) -> Path:
    path.write_bytes(data)
    if size is not None:
        os.truncate(path, size)
    return path


NORM = ("output_norm.weight", (7168,), 0, 0)  # F32: 28,672 bytes at offset 0


def test_a_small_file_read(tmp_path):
    data = header([NORM], kv=gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("deepseek2"),
                  kv_count=1)  # fmt: skip
    start = -(-len(data) // 32) * 32
    listing = read_gguf(write(tmp_path / "a.gguf", data, start + 28_672))
    assert listing.tensors[0].nbytes == 28_672 and listing.architecture == "deepseek2"


@pytest.mark.parametrize(
    ("data", "size", "message"),
    [
        (b"PK\x03\x04" + bytes(60), None, r"magic: not a GGUF file \(it starts with b'PK\\x03\\x04', expected b'GGUF'\)"),
        (header([NORM], version=1), None, r"version: 1: expected 2 or 3"),
        (header([], kv=gguf_string("general.name") + struct.pack("<I", 8) + gguf_string("K2"), kv_count=1)[:46], None,
         r"key 'general.name': the header is cut short: it needs byte 48, the file has 46 bytes"),
        (header([NORM], tensor_count=2**60), None, r"tensor_count: 1,152,921,504,606,846,976 tensor infos cannot fit"),
        (header([NORM], kv_count=2**40), None, r"kv_count: 1,099,511,627,776 key-value pairs cannot fit"),
        (header([("blk.0.x.weight", (7168, 10), 99, 0)]), 1 << 20, r"tensor 'blk.0.x.weight': unknown ggml type 99"),
        (header([("blk.0.x.weight", (100, 10), 14, 0)]), 1 << 20,
         r"tensor 'blk.0.x.weight': shape \[100, 10\]: a row of 100 is not a whole number of Q6_K blocks of 256"),
        (header([("blk.0.x.weight", (2**40, 2**40), 0, 0)]), 1 << 20, r"tensor 'blk.0.x.weight': shape \[1099511627776, 1099511627776\]: expected dimensions of 1 or more, at most 2\^63 − 1 elements"),
        (header([("blk.0.x.weight", (7168,), 0, 0)] * 2), 1 << 20, r"tensor 'blk.0.x.weight': duplicated tensor name"),
        (header([("x", (7168,), 0, 0)], kv=gguf_string("k") + struct.pack("<I", 8) + struct.pack("<Q", 2**50), kv_count=1),
         1 << 20, r"key 'k': a string of 1,125,899,906,842,624 bytes runs past the end of the file"),
        (header([("x", (7168,), 0, 0)], kv=gguf_string("k") + struct.pack("<I", 42), kv_count=1), 1 << 20,
         r"key 'k': unknown value type 42"),
        (header([NORM]), 100, r"tensor 'output_norm.weight': its data \(bytes 96 to 28,768\) extends past the end of the file \(100 bytes\)"),
        (header([("x", (7168,), 0, 7)]), 1 << 20, r"tensor 'x': data offset 7 is not a multiple of the alignment 32"),
    ],
)  # fmt: skip
def test_bad_header_is_one_error_naming_file_and_field(tmp_path, data, size, message):
    path = write(tmp_path / "bad.gguf", data, size)
    with pytest.raises(CheckpointError, match=f"^{tmp_path}/bad.gguf: {message}"):
        read_gguf(path)


def test_a_header_too_long_to_read(tmp_path):
    # a 300 MB string in a 1 GB (sparse) file: refused before it is read
    data = header([], kv=gguf_string("k") + struct.pack("<IQ", 8, 300_000_000), kv_count=1)
    path = write(tmp_path / "long.gguf", data, 10**9)
    with pytest.raises(
        CheckpointError, match=r"long.gguf: key 'k': the header runs past 67,108,864 bytes \(64 MiB\)"
    ):
        read_gguf(path)


# --- issue 26: counts bounded by what the header can hold, read in one pass -----------------------------


def counting_reader(path: Path):
    """read(start, length) over a file, and the (start, length) of every read it was asked for."""
    asked: list[tuple[int, int]] = []

    def read(start: int, length: int) -> bytes:
        asked.append((start, length))
        with path.open("rb") as handle:
            handle.seek(start)
            return handle.read(length)

    return read, asked


def test_an_array_of_2_24_empty_strings_is_refused_at_once(tmp_path):
    # 2^24 strings take at least 8 × 2^24 = 134,217,728 bytes (each its u64 length): more than the
    # 64 MiB a header may take, so refused from the count alone, before the strings are read. The
    # key-value starts at byte 24 (magic 4, version 4, two u64 counts); key "k" (8 + 1), type and item
    # type (4 + 4) and the count (8) end at byte 49: 67,108,864 − 49 = 67,108,815 bytes are left.
    data = header([], kv=gguf_string("k") + struct.pack("<IIQ", 9, 8, 2**24), kv_count=1)
    path = write(tmp_path / "strings.gguf", data, len(data) + 8 * 2**24)
    read, asked = counting_reader(path)
    with pytest.raises(
        CheckpointError,
        match=r"key 'k': 16,777,216 STRING items of at least 8 bytes cannot fit in the 67,108,815 bytes "
        r"left of the 67,108,864 a header may take",
    ):
        read_header(read, path.stat().st_size, str(path))
    assert asked == [(0, 1 << 20)]  # the first MiB, and nothing after it


def test_a_header_is_read_once_in_chunks_that_double(tmp_path):
    # (64 MiB − 100) / 8 = 8,388,595 empty strings: a header of 49 + 8n = 67,108,809 bytes, just under
    # the cap, read in one pass: 1, 2, 4, 8, 16 MiB, then 16 MiB at a time (63 MiB, 66,060,288 bytes),
    # then the 1,048,521 left of the file; each byte once
    n = (64 * 2**20 - 100) // 8
    data = header([], kv=gguf_string("k") + struct.pack("<IIQ", 9, 8, n), kv_count=1)
    path = write(tmp_path / "just-under.gguf", data, len(data) + 8 * n)
    read, asked = counting_reader(path)
    found = read_header(read, path.stat().st_size, str(path))
    assert found.metadata["k"] == GGUFArray("STRING", n)
    mib = 1 << 20
    assert [length for _, length in asked] == [
        mib,
        2 * mib,
        4 * mib,
        8 * mib,
        16 * mib,
        16 * mib,
        16 * mib,
        1_048_521,
    ]
    assert [start for start, _ in asked] == [
        sum(length for _, length in asked[:i]) for i in range(len(asked))
    ]
    assert sum(length for _, length in asked) == 67_108_809 == path.stat().st_size


def test_a_long_numeric_array_is_stepped_over_unread(tmp_path):
    # 40 MiB of F32 scores: skipped by offset, not fetched; the key after it is read from its own offset
    n = 10 * 2**20
    kv = gguf_string("scores") + struct.pack("<IIQ", 9, 6, n)
    data = header([], kv=kv, kv_count=2)
    after = len(data) + 4 * n
    path = write(tmp_path / "scores.gguf", data, after)
    with path.open("r+b") as handle:
        handle.seek(after)
        handle.write(gguf_string("general.name") + struct.pack("<I", 8) + gguf_string("K2"))
    read, asked = counting_reader(path)
    found = read_header(read, path.stat().st_size, str(path))
    assert found.metadata["scores"] == GGUFArray("FLOAT32", n) and found.metadata["general.name"] == "K2"
    assert asked == [(0, 1 << 20), (after, path.stat().st_size - after)]


@pytest.mark.parametrize(
    ("count_field", "count", "message"),
    [
        ("kv", 10**6, r"kv_count: 1,000,000 key-value pairs, more than kimicount reads \(65,536 at most\)"),
        (
            "tensors",
            2**18 + 1,
            r"tensor_count: 262,145 tensors, more than kimicount lists \(262,144 at most\)",
        ),
    ],
)
def test_counts_past_what_kimicount_keeps_are_refused_at_once(tmp_path, count_field, count, message):
    # a 22 MB (sparse) file that could hold a million 22-byte pairs, or 262,145 tensor infos of 32 bytes
    data = header([], kv_count=count) if count_field == "kv" else header([], tensor_count=count)
    path = write(tmp_path / "many.gguf", data, 22_000_000)
    read, asked = counting_reader(path)
    with pytest.raises(CheckpointError, match=message):
        read_header(read, path.stat().st_size, str(path))
    assert asked == [(0, 1 << 20)]


def test_split_count_is_a_u16(tmp_path):
    # split.count 2^40: a MemoryError before (a list of every part's name); gguf-split writes a u16
    kv = gguf_string("split.count") + struct.pack("<IQ", 10, 2**40)
    path = write(tmp_path / "m-00001-of-00002.gguf", header([], kv=kv, kv_count=1))
    with pytest.raises(
        CheckpointError, match=r"key 'split.count': 1099511627776, expected 1 to 65,535 \(a u16"
    ):
        read_gguf(path)


F32_7168 = 7168 * 4  # 28,672 bytes, a multiple of the alignment 32


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        # both at offset 0: the second overlaps the first
        ([("a", (7168,), 0, 0), ("b", (7168,), 0, 0)], r"tensor 'b': data offset 0, expected 28,672"),
        # the second inside the first
        ([("a", (7168,), 0, 0), ("b", (7168,), 0, 32)], r"tensor 'b': data offset 32, expected 28,672"),
        # a gap of 32 bytes between them
        ([("a", (7168,), 0, 0), ("b", (7168,), 0, F32_7168 + 32)], r"tensor 'b': data offset 28,704, expected 28,672"),
        # in the wrong order
        ([("a", (7168,), 0, F32_7168), ("b", (7168,), 0, 0)], r"tensor 'a': data offset 28,672, expected 0"),
    ],
)  # fmt: skip
def test_tensors_lie_one_after_another_in_order(tmp_path, tensors, message):
    path = write(tmp_path / "t.gguf", header(tensors), 1 << 20)
    with pytest.raises(CheckpointError, match=f"{message}: each tensor's data follows the one before"):
        read_gguf(path)
    contiguous = [("a", (7168,), 0, 0), ("b", (7168,), 0, F32_7168)]
    assert [t.name for t in read_gguf(write(tmp_path / "ok.gguf", header(contiguous), 1 << 20)).tensors] == [
        "a",
        "b",
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # the key starts at byte 32 (24 of header, 8 of length); its 9th byte, 0xff, is byte 40
        (header([], kv=struct.pack("<Q", 9) + b"general.\xff" + struct.pack("<IB", 0, 1), kv_count=1),
         r"key-value pair 0: its key is not UTF-8 \(invalid start byte at byte 40 of the file\)"),
        (header([], kv=struct.pack("<Q", 0) + struct.pack("<IB", 0, 1), kv_count=1), r"key-value pair 0: an empty key"),
        # a tensor name "blk.0.\xc3" (a lead byte without its continuation) at bytes 32 to 38
        (struct.pack("<4sIQQ", b"GGUF", 3, 1, 0) + struct.pack("<Q", 7) + b"blk.0.\xc3" + struct.pack("<IQIQ", 1, 7168, 0, 0),
         r"tensor 0: its name is not UTF-8 \(unexpected end of data at byte 38 of the file\)"),
        (header([("x" * 64, (7168,), 0, 0)]), r"tensor 0: a name of 64 bytes, at most 63 \(GGML_MAX_NAME\)"),
        (header([], kv=gguf_string("general.alignment") + struct.pack("<IQ", 10, 32), kv_count=1),
         r"key 'general.alignment': of type UINT64, expected UINT32"),
    ],
)  # fmt: skip
def test_keys_and_names_as_gguf_cpp_reads_them(tmp_path, data, message):
    path = write(tmp_path / "n.gguf", data, 1 << 20)
    with pytest.raises(CheckpointError, match=f"^{tmp_path}/n.gguf: {message}"):
        read_gguf(path)


def test_a_name_of_63_bytes_is_read(tmp_path):
    path = write(tmp_path / "n.gguf", header([("x" * 63, (7168,), 0, 0)]), 1 << 20)
    assert read_gguf(path).tensors[0].name == "x" * 63


def test_a_folder_holding_one_split_set(tmp_path):
    files = write_gguf(tmp_path / "m.gguf", read_map("deepseek-v3.1-terminus")[:30], as_listed,
                       deepseek2_metadata("v3"), split_max_tensors=10)  # fmt: skip
    (tmp_path / "README.md").write_text("not a gguf")
    listing = read_gguf(tmp_path)
    assert listing.files == tuple(map(str, files)) and len(listing.tensors) == 30
    (tmp_path / "mmproj.gguf").write_bytes(b"GGUF")
    with pytest.raises(SourceError, match=r"4 .gguf files that are not one split set \(.*\); name one file$"):
        read_gguf(tmp_path)
    with pytest.raises(SourceError, match=r"empty: no .gguf file in this folder"):
        read_gguf((tmp_path / "empty").mkdir() or tmp_path / "empty")


def test_not_a_file(tmp_path):
    with pytest.raises(SourceError, match="nope.gguf: no such file"):
        read_gguf(tmp_path / "nope.gguf")


def test_agrees_with_gguf_pys_own_reader(tmp_path):
    # GGUFReader, llama.cpp's reference reader in Python, on the same full-size files: every tensor's
    # name, shape, type and bytes, and every scalar of the metadata, the same
    from gguf import GGUFReader

    files = write_gguf(tmp_path / "R1-Q8_0.gguf", read_map("deepseek-v3.1-terminus"),
                       lambda t: "F32" if t.dtype == "f32" else "Q8_0", deepseek2_metadata("deepseek-v3"),
                       split_max_tensors=500, tokens=1000)  # fmt: skip
    listing = read_gguf(files[0])
    theirs = [GGUFReader(f) for f in files]
    assert [(t.name, t.shape, t.ggml_type, t.nbytes) for t in listing.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), t.tensor_type.name, int(t.n_bytes))
        for r in theirs
        for t in r.tensors
    ]
    scalars = {
        name: field.contents()
        for name, field in theirs[0].fields.items()
        if not name.startswith("GGUF.") and field.types[0] != GGUFValueType.ARRAY
    }
    assert scalars == {k: v for k, v in listing.metadata.items() if k in scalars}
    assert set(scalars) == {k for k, v in listing.metadata.items() if not hasattr(v, "length")}
    tokens = listing.metadata["tokenizer.ggml.tokens"]
    assert (tokens.item_type, tokens.length) == (
        "STRING",
        len(theirs[0].fields["tokenizer.ggml.tokens"].data),
    )


def test_short_arrays_keep_their_values(tmp_path):
    metadata = {
        "general.tags": (["deepseek", "kimi"], GGUFValueType.ARRAY),
        "x.layers": ([1, 2, 3], GGUFValueType.ARRAY),
        "x.long": (list(range(300)), GGUFValueType.ARRAY),
    }
    (file,) = write_gguf(tmp_path / "arrays.gguf", read_map("kimi-k2-thinking")[:2], as_listed, metadata)
    found = read_gguf(file).metadata
    assert (found["general.tags"].item_type, found["general.tags"].values) == ("STRING", ("deepseek", "kimi"))
    assert found["x.layers"].values == (1, 2, 3) and found["x.layers"].length == 3
    assert (found["x.long"].length, found["x.long"].values) == (300, None)  # longer than 256: length only
