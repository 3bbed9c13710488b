"""Headers as verify's fast paths read them (decoded into typed entries by msgspec when installed, else
every entry checked column by column), each test run twice: with msgspec and with the standard library
alone. Every malformed header is refused with the one-line message written out here, naming the tensor
and what is wrong; well-formed headers read to the same names, kinds and offsets; where msgspec
refuses what the standard library reads (NaN, lone surrogates), or the typed decode refuses a
well-formed header (metadata with a tensor's keys), the plain reading stands. And end to end: a tiny
checkpoint written by safetensors itself verifies the same without msgspec, and a packed lm_head in
K2.5's layout is counted against its config."""

from __future__ import annotations

import json
import struct
import sys

import pytest

from kimicount import headers
from kimicount.checkpoint import parse_index
from kimicount.errors import CheckpointError
from kimicount.headers import parse_header

from .checkpoints import kimi_k25_layout, kimi_k25_listing, packed_int4, write_tiny_fp8_checkpoint
from .helpers import invoke


@pytest.fixture(params=["msgspec", "json"])
def parser(request, monkeypatch):
    """Each test twice: with msgspec (when installed) and with the standard library alone."""
    if request.param == "msgspec":
        pytest.importorskip("msgspec")
    else:
        monkeypatch.setitem(sys.modules, "msgspec", None)  # as if not installed: `import msgspec` fails
    headers._header_decoders.cache_clear()  # the decoders are made once, of whichever msgspec there is
    yield request.param
    headers._header_decoders.cache_clear()


def _header(entries: str, data: int) -> tuple[bytes, int]:
    """A header's JSON text, as written (msgspec and json must not see it re-encoded), and its file size."""
    raw = ("{" + entries + "}").encode()
    return raw, 8 + len(raw) + data


def _parse(entries: str, data: int):
    raw, size = _header(entries, data)
    return parse_header(raw, "model.safetensors", size)


NORM = '{"dtype":"BF16","shape":[7168],"data_offsets":[0,14336]}'

BAD = {
    # past 64 bits: the typed decode refuses it, and the message shows the int the plain parse reads
    "dimension past 64 bits": (
        '"w":{"dtype":"BF16","shape":[18446744073709551616],"data_offsets":[0,14336]}',
        14336,
        (
            "tensor 'w': data_offsets [0, 14336] hold 14,336 bytes, but BF16 [18446744073709551616] "
            "needs 36,893,488,147,419,103,232"
        ),
    ),
    "a bool dimension": (
        '"w":{"dtype":"BF16","shape":[true],"data_offsets":[0,2]}',
        2,
        "tensor 'w': shape [true] is not a list of non-negative integers",
    ),
    # equal to 1 as a dict key, so it must be refused before shapes are grouped
    "a bool dimension beside an int one": (
        (
            '"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},'
            '"b":{"dtype":"BF16","shape":[true],"data_offsets":[2,4]}'
        ),
        4,
        "tensor 'b': shape [true] is not a list of non-negative integers",
    ),
    "a float dimension beside an int one": (
        (
            '"a":{"dtype":"BF16","shape":[7168],"data_offsets":[0,14336]},'
            '"b":{"dtype":"BF16","shape":[7168.0],"data_offsets":[14336,28672]}'
        ),
        28672,
        "tensor 'b': shape [7168.0] is not a list of non-negative integers",
    ),
    "NaN (the standard library reads it, msgspec refuses it)": (
        '"w":{"dtype":"BF16","shape":[NaN],"data_offsets":[0,2]}',
        2,
        "tensor 'w': shape [NaN] is not a list of non-negative integers",
    ),
    "an empty string for a shape": (
        '"w":{"dtype":"F32","shape":"","data_offsets":[0,4]}',
        4,
        "tensor 'w': shape \"\" is not a list of non-negative integers",
    ),
    "an empty object for a shape": (
        '"w":{"dtype":"F32","shape":{},"data_offsets":[0,4]}',
        4,
        "tensor 'w': shape {} is not a list of non-negative integers",
    ),
    "three offsets": (
        '"w":{"dtype":"F32","shape":[],"data_offsets":[0,4,8]}',
        4,
        "tensor 'w': data_offsets [0, 4, 8] is not two ascending non-negative integers",
    ),
    "offsets as a string": (
        '"w":{"dtype":"F32","shape":[],"data_offsets":"04"}',
        4,
        "tensor 'w': data_offsets \"04\" is not two ascending non-negative integers",
    ),
    "an entry that is a list": (
        '"w":["BF16",[7168],[0,14336]]',
        14336,
        "tensor 'w': expected an object with dtype, shape and data_offsets",
    ),
    "an unhashable dtype": (
        '"w":{"dtype":["BF16"],"shape":[7168],"data_offsets":[0,14336]}',
        14336,
        "tensor 'w': unknown dtype [\"BF16\"]",
    ),
    "F4 with an odd element count (not whole bytes)": (
        '"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}',
        2,
        "tensor 'w': data_offsets [0, 2] hold 2 bytes, but F4 [3] needs 1 and 4 bits",
    ),
    "offsets ending before they begin": (
        '"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}',
        0,
        "tensor 'w': data_offsets [4, 0] is not two ascending non-negative integers",
    ),
    "a gap, written out of order": (
        '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}',
        12,
        "tensor 'b' at data_offsets [8, 12] leaves a gap at byte 4",
    ),
    "trailing bytes": (f'"w":{NORM}', 14400, "tensors cover 14,336 bytes but the data area holds 14,400"),
    "metadata not strings": (
        f'"__metadata__":{{"format":1}},"w":{NORM}',
        14336,
        "__metadata__ must map strings to strings",
    ),
    # decoded as a tensor entry by the typed path, which then reads the metadata again as strings
    "metadata with a tensor's keys": (
        f'"__metadata__":{NORM},"w":{NORM}',
        14336,
        "__metadata__ must map strings to strings",
    ),
    "an entry without data_offsets": (
        '"w":{"dtype":"BF16","shape":[7168]}',
        14336,
        "tensor 'w': expected an object with dtype, shape and data_offsets",
    ),
    "a null shape": (
        '"w":{"dtype":"BF16","shape":null,"data_offsets":[0,14336]}',
        14336,
        "tensor 'w': shape null is not a list of non-negative integers",
    ),
    "a negative dimension": (
        '"w":{"dtype":"BF16","shape":[-7168],"data_offsets":[0,14336]}',
        14336,
        "tensor 'w': shape [-7168] is not a list of non-negative integers",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_headers_say_the_same_with_either_parser(parser, case):
    entries, data, message = BAD[case]
    with pytest.raises(CheckpointError) as error:
        _parse(entries, data)
    assert str(error.value).startswith(f"model.safetensors: {message}") and "\n" not in str(error.value)


def test_good_headers_read_the_same_with_either_parser(parser):
    # Written out of data order, with a zero-size tensor, a scalar, metadata, and a name that is a
    # lone surrogate (valid JSON; msgspec refuses it, so the standard library reads this file).
    entries = (
        '"__metadata__":{"format":"pt"},'
        '"z":{"dtype":"BF16","shape":[7168],"data_offsets":[6,14342]},'
        '"empty":{"dtype":"F32","shape":[0,56],"data_offsets":[6,6]},'
        '"s":{"dtype":"F32","shape":[],"data_offsets":[2,6]},'
        '"\\ud800":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}'
    )
    header = _parse(entries, 14342)
    assert header.names == ("z", "empty", "s", "\ud800")
    assert header.kinds == ("[7168] BF16", "[0, 56] F32", "[] F32", "[2] F8_E4M3")
    assert (tuple(header.begins), tuple(header.ends)) == ((6, 6, 2, 0), (14342, 6, 6, 2))
    assert header.kind_counts == {"[7168] BF16": 1, "[0, 56] F32": 1, "[] F32": 1, "[2] F8_E4M3": 1}
    assert (header.metadata, header.data_bytes) == ({"format": "pt"}, 14342)
    z, empty, scalar, _ = header.tensors
    assert (z.shape, z.data_offsets, z.elements, z.nbytes) == ((7168,), (6, 14342), 7168, 14336)
    assert (empty.elements, empty.nbytes, scalar.elements, scalar.nbytes) == (0, 0, 1, 4)


def test_metadata_with_a_tensors_keys_in_strings_reads_with_either_parser(parser):
    # The typed decode takes "shape" for a tensor's and refuses a string there; the plain parse reads it.
    header = _parse(f'"__metadata__":{{"shape":"x","format":"pt"}},"w":{NORM}', 14336)
    assert (header.names, header.metadata) == (("w",), {"shape": "x", "format": "pt"})


def test_duplicate_keys_the_last_wins_with_either_parser(parser):
    header = _parse(f'"w":{{"dtype":"F32","shape":[3584],"data_offsets":[0,14336]}},"w":{NORM}', 14336)
    assert header.names == ("w",) and header.kinds == ("[7168] BF16",)
    header = _parse('"w":{"dtype":"F32","dtype":"BF16","shape":[7168],"data_offsets":[0,14336]}', 14336)
    assert header.kinds == ("[7168] BF16",)


def test_the_usual_header_is_decoded_typed():
    # The fast path is taken: names, dtypes, shapes and offsets straight from msgspec, metadata apart.
    pytest.importorskip("msgspec")
    raw, _ = _header(
        f'"__metadata__":{{"format":"pt"}},"w":{NORM},"s":{{"dtype":"F32","shape":[],"data_offsets":[14336,14340]}}',
        14340,
    )
    assert headers._typed_header(raw) == (
        ("w", "s"),
        ["BF16", "F32"],
        [(7168,), ()],
        [(0, 14336), (14336, 14340)],
        {"format": "pt"},
    )
    for odd in (
        '"w":{"dtype":"BF16","shape":[true],"data_offsets":[0,2]}',
        '"w":{"dtype":"X","shape":[],"data_offsets":[0,2]}',
    ):
        assert headers._typed_header(_header(odd, 2)[0]) is None


def test_index_total_size_past_64_bits(parser):
    # past 64 bits, read as the int it is by either parser
    text = '{"metadata":{"total_size":18446744073709551616},"weight_map":{"w":"model.safetensors"}}'
    assert parse_index(text.encode(), "model.safetensors.index.json").total_size == 2**64


def test_tiny_real_checkpoint_with_either_parser(tmp_path, parser):
    # Written by safetensors itself (keys in name order, data in its own order): the same verdict and
    # counts as tests/test_verify.py finds, whichever parser reads it.
    folder = write_tiny_fp8_checkpoint(tmp_path / "tiny")
    result = invoke("verify", "--path", str(folder), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # 1,450,884 parameters, worked out by hand in tests/test_verify.py
    assert report["mismatches"] == [] and report["parameters"] == {"expected": 1_450_884, "found": 1_450_884}


def test_a_packed_linear_the_config_ignores_counts_against_it(tmp_path):
    # K2.5's config ignores lm_head by its name: packed anyway, it is counted as packed against the
    # config (and is no mismatch: real checkpoints differ from their configs so).
    listing = kimi_k25_listing()
    del listing["language_model.lm_head.weight"]
    for suffix, entry in packed_int4((163840, 7168)).items():
        listing[f"language_model.lm_head.{suffix}"] = entry
    report = json.loads(
        invoke("verify", "--path", str(kimi_k25_layout(tmp_path / "k25", listing)), "--json").stdout
    )
    assert report["mismatches"] == []
    assert report["packed_linears"] == {
        "packed": 60 * 384 * 3 + 1,
        "plain": 61 * 5 + 3 + 60 * 3,  # attention, the dense MLP, shared experts
        "packed_against_config": 1,
        "plain_against_config": 0,
    }


def test_the_header_length_prefix_is_not_json(parser):
    raw, size = _header(f'"w":{NORM}', 14336)
    with pytest.raises(CheckpointError, match="header is not valid JSON"):
        parse_header(struct.pack("<Q", len(raw)) + raw, "model.safetensors", size + 8)
