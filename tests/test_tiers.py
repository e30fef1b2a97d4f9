"""The tiers a test falls in are found in its code (tests/conftest.py): what it, its helpers and its fixtures use."""

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies

from tests.browser import headless_chromium
from tests.conftest import HOTPOT, tiers_of
from tests.helpers.cli import run


def _item(function, *, fixtures=(), model=False):
    """What tiers_of reads of a collected test."""
    definitions = {name: [SimpleNamespace(func=fixture)] for name, fixture in fixtures}
    return SimpleNamespace(function=function, fixturenames=[name for name, _ in fixtures],
                           _fixtureinfo=SimpleNamespace(name2fixturedefs=definitions),
                           get_closest_marker=lambda name: object() if model and name == "model" else None)


def _through_a_helper():
    return run("--version")  # tests/helpers/cli.py starts the command line as a child process


def _local_import():
    import multiprocessing

    return multiprocessing.cpu_count()


def _a_ray_fixture():
    return None


@pytest.mark.parametrize("function, fixtures, want", [
    (lambda: subprocess.run(["true"], check=True), (), {"subprocess"}),
    (_through_a_helper, (), {"subprocess"}),
    (_local_import, (), {"subprocess"}),
    (lambda: headless_chromium(), (), {"browser"}),
    (lambda: HOTPOT.read_text(), (), {"data"}),
    (lambda ray_cluster: None, (("ray_cluster", _a_ray_fixture),), {"ray"}),
    (lambda: sum([1, 2]), (), set()),
    (lambda: Path("tests").exists(), (), set()),
], ids=["subprocess", "via-helper", "local-import", "browser", "shared-data", "ray-fixture", "plain", "own-path"])
def test_a_tests_tiers_are_found_in_its_code(function, fixtures, want):
    assert tiers_of(_item(function, fixtures=fixtures)) == want


def test_a_test_that_says_it_loads_a_model_is_in_the_model_tier():
    assert tiers_of(_item(lambda: None, model=True)) == {"model"}


def _fuzzes():
    @given(strategies.integers())
    def each(n):
        assert n == n

    each()


def test_a_test_that_runs_hypothesis_is_in_the_fuzz_tier():
    assert tiers_of(_item(_fuzzes)) == {"fuzz"}
