"""Fixtures shared by the tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# the helpers' checks (fails_cleanly) report their operands as a test's own asserts do
pytest.register_assert_rewrite("tests.helpers")

from .helpers import KIMI_K2  # after the rewrite is registered


@pytest.fixture
def write_config(tmp_path):
    """Write a config dictionary (or raw text) to a config.json and return its path."""

    def write(config, name: str = "config.json") -> Path:
        path = tmp_path / name
        path.write_text(config if isinstance(config, str) else json.dumps(config))
        return path

    return write


@pytest.fixture
def kimi_config() -> dict:
    return json.loads((KIMI_K2 / "config.json").read_text())
