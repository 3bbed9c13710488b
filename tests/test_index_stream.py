"""model.safetensors.index.json read as a stream (kimicount.index_stream), against the standard library's
json.loads of the same bytes: the same names, files and metadata for any valid index (escapes, braces
and quotes inside names, whitespace anywhere, pieces cut anywhere), and the same error, at the same line
and column, for an invalid one."""

from __future__ import annotations

import json
import random

import pytest

from kimicount.checkpoint import index_agrees, parse_index
from kimicount.errors import CheckpointError
from kimicount.headers import parse_header
from kimicount.index_stream import CHUNK, read_index_stream

from .checkpoints import header_bytes


def chunked(data: bytes, sizes: list[int]) -> list[bytes]:
    """`data` cut into chunks of the given sizes, in turn."""
    chunks, at, i = [], 0, 0
    while at < len(data):
        chunks.append(data[at : at + sizes[i % len(sizes)]])
        at += sizes[i % len(sizes)]
        i += 1
    return chunks


def odd_names(count: int, seed: int) -> dict[str, str]:
    """Names with what a streaming reader could trip on: escaped quotes and backslashes, braces, the
    `",` a piece is cut after, non-ASCII, and 37 files (a piece holds several)."""
    rng = random.Random(seed)
    tricky = ['"', "\\", "}", '",', "{", "é", "\u2028", ":", " ", "\t"]
    names = {}
    for i in range(count):
        name = f"model.layers.{i % 61}.mlp.experts.{i}.w1.weight"
        if rng.random() < 0.01:
            name += rng.choice(tricky) + str(i)
        names[name] = f"model-{rng.randrange(37):05d}-of-00037.safetensors"
    return names


@pytest.mark.parametrize("indent, sizes", [(2, [CHUNK]), (None, [1, 7, 4096, 65_537]), (0, [300_001])])
def test_the_map_and_metadata_are_the_standard_librarys(indent, sizes):
    weight_map = odd_names(60_000, seed=indent or 0)  # 3.6 MB: pieces cut in several places
    text = json.dumps({"weight_map": weight_map, "metadata": {"total_size": 2**70}}, indent=indent).encode()
    assert len(text) > 3 * CHUNK
    expected = json.loads(text)
    contents = read_index_stream(chunked(text, sizes), "index.json", keep_map=True)
    assert contents.weight_map.names == expected["weight_map"]
    assert contents.metadata == {"total_size": 2**70}
    listings = contents.weight_map.listings
    by_file: dict[str, list[str]] = {}
    for name, file in expected["weight_map"].items():
        by_file.setdefault(file, []).append(name)
    assert {f: (l.tensors, l.name_chars) for f, l in listings.items()} == {
        f: (len(names), sum(map(len, names))) for f, names in by_file.items()
    }
    assert contents.bytes_read == len(text)


def test_escapes_surrogates_and_duplicates_as_the_standard_library_reads_them():
    text = (
        b'{"weight_map": {"a\\u00e9\\"b": "f\\/1", "lone\\ud800": "f1", "x": "f2", "x": "f3",'
        b' "\\u0041": "f1"},\n "metadata": {"total_size": 7}, "metadata": {"total_size": 8}}'
    )
    expected = json.loads(text)
    contents = read_index_stream([text], "i", keep_map=True)
    assert contents.weight_map.names == expected["weight_map"]  # the last "x" counts, as in a dict
    assert contents.metadata == expected["metadata"] == {"total_size": 8}


@pytest.mark.parametrize(
    "text",
    [
        '{"weight_map": {"a": "f",}}',
        '{"weight_map": {"a": "f" "b": "f"}}',
        '{"weight_map": {"a" "f"}}',
        '{"weight_map": {"a": "f"}} x',
        '{"weight_map": {"a": "f"}',
        '{"weight_map": {"a": "f\n"}}',
        '{"metadata": {"total_size": 1,}, "weight_map": {"a": "f"}}',
        '{"weight_map" {"a": "f"}}',
        '{\n  "weight_map": {\n    "a": "f",\n    "b": "g"\n    "c": "h"\n  }\n}',
        "",
        "[1, 2",
    ],
)
def test_invalid_json_is_said_where_the_standard_library_says_it(text):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(CheckpointError) as error:
        read_index_stream(chunked(text.encode(), [5]), "model.safetensors.index.json")
    message = str(error.value)
    assert message.startswith("model.safetensors.index.json: not valid JSON ("), message
    assert f"line {expected.value.lineno} column {expected.value.colno})" in message, (
        message,
        expected.value,
    )


@pytest.mark.parametrize(
    "text, needle",
    [
        ('{"weight_map": {"a": 1}}', "expected an object with a 'weight_map' of tensor name -> file name"),
        ('{"weight_map": ["a"]}', "expected an object with a 'weight_map'"),
        ("[]", "expected an object with a 'weight_map'"),
        ('{"weight_map": {}}', "the weight_map names no tensors"),
        ('{"metadata": [], "weight_map": {"a": "f"}}', "metadata [] is not an object"),
        ('{"metadata": {"total_size": -1}, "weight_map": {"a": "f"}}', "metadata.total_size -1 is not"),
        ('{"weight_map": {"a": "../f"}}', 'names the file "../f", which is not a plain relative name'),
        (b'{"weight_map": {"a": "\xff"}}', "not UTF-8"),
        (
            '{"metadata": {"x": "' + "y" * (2 << 20) + '"}, "weight_map": {"a": "f"}}',
            "a value over 1,048,576",
        ),
    ],
)
def test_what_is_no_index_is_said_in_one_line(text, needle):
    data = text if isinstance(text, bytes) else text.encode()
    with pytest.raises(CheckpointError, match="^model.safetensors.index.json: ") as error:
        parse_index(data, "model.safetensors.index.json")
    assert needle in str(error.value)


def test_index_agrees_with_the_headers_only_when_each_file_lists_the_same_names():
    shards = {
        "a.safetensors": {"x.weight": ((4,), "BF16"), "y.weight": ((4,), "BF16")},
        "b.safetensors": {"z.weight": ((2,), "F32")},
    }
    headers = []
    for file, tensors in shards.items():
        raw, size = header_bytes(tensors)
        headers.append(parse_header(raw, file, 8 + len(raw) + size))

    def index(weight_map):
        return parse_index(json.dumps({"weight_map": weight_map}).encode(), "i", keep_map=False)

    right = {"x.weight": "a.safetensors", "y.weight": "a.safetensors", "z.weight": "b.safetensors"}
    assert index_agrees(index(right), headers)
    for wrong in (
        {**right, "y.weight": "b.safetensors"},  # in the wrong file
        {**right, "w.weight": "b.safetensors"},  # one more
        {"x.weight": "a.safetensors", "z.weight": "b.safetensors"},  # one fewer
        {"x.weight": "a.safetensors", "Y.weight": "a.safetensors", "z.weight": "b.safetensors"},  # another
    ):
        assert not index_agrees(index(wrong), headers), wrong
