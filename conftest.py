"""Doctests in kimicount/ read the bundled Kimi K2 spec as `k2`."""

import pytest


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    from kimicount.spec import bundled_spec

    doctest_namespace["k2"] = bundled_spec()
