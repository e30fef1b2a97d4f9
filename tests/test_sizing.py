"""The grid's method builder: one index and one reading of the demonstrations for every configuration (no model)."""

import pytest

from ragfunnel.errors import InputError
from ragfunnel.llm import FakeLLM
from ragfunnel.methods.demonstrations import Demonstration
from ragfunnel.scaling.grid import Config
from ragfunnel.scaling.sizing import GridMethods, open_index
from tests.helpers.runs import grid_inputs

DEMO = Demonstration("What is the capital of Germany?", "Berlin")  # the one in grid_inputs' demonstrations file


def test_grid_methods_share_one_index_and_the_demonstrations_read_once(tmp_path):
    pytest.importorskip("ragfunnel.methods.drag")
    _, demos = grid_inputs(tmp_path)
    index_dir = tmp_path / "ix"
    methods = GridMethods.open(index_dir, "fake:grid", demos, "qa")
    assert (methods.index_dir, methods.strong, methods.task) == (str(index_dir.resolve()), "fake:grid", "qa")
    assert methods.demonstrations == (DEMO,)
    demos.unlink()  # read once: building a configuration's method does not read the file again
    llm = FakeLLM(lambda prompt, i: "Paris")
    drag = methods.build(Config("drag", 2, 1), llm)
    assert drag.strong is llm and drag.options.documents == 2 and drag.options.demonstrations == [DEMO]
    assert drag.options.index is open_index(methods.index_dir)  # opened once per process
    rag = methods.build(Config("rag", 1, 0), llm)
    assert (rag.options.documents, rag.options.demonstrations) == (1, [])
    iterdrag = methods.build(Config("iterdrag", 3, 1, 4), llm)
    assert (iterdrag.config.iterations, iterdrag.options.documents, iterdrag.options.demonstrations) == (4, 3, [DEMO])
    assert methods(Config("rag", 1, 0)).strong == "fake:grid"  # by name: what Ray workers get
    assert GridMethods.open(index_dir, "fake:grid", None, "qa").demonstrations == ()


def test_grid_methods_stop_at_a_missing_index_then_at_a_missing_demonstrations_file(tmp_path):
    grid_inputs(tmp_path)
    with pytest.raises(FileNotFoundError, match="manifest.json"):  # before the demonstrations are read
        GridMethods.open(tmp_path / "no-index", "fake:grid", tmp_path / "no-demos.jsonl", "qa")
    with pytest.raises(InputError, match="no-demos.jsonl does not exist; make one with `ragfunnel scale demos`"):
        GridMethods.open(tmp_path / "ix", "fake:grid", tmp_path / "no-demos.jsonl", "qa")
