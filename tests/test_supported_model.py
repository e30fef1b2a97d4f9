"""An answer below the calibration's ``supported_at`` says so, on the bundled 1.5B: one caution line on stderr,
``supported: false`` in ``--json``, and citations only of passages that state the answer (marker: model)."""

from __future__ import annotations

import json

import pytest

from ragfunnel.confidence.calibration import SHIPPED, CalibrationFile
from tests.helpers.cli import run

pytestmark = pytest.mark.model

HARBOUR = ("The ferry to Gull Rock leaves the harbour at nine every morning and returns at six. "
           "Gulls nest on the rock each spring, and the old pier was rebuilt in 1999. ") * 3
KEEPER = "The lighthouse keeper on Gull Rock is called Ada Brun, and she has kept the light since 2004. "


@pytest.fixture
def strict_calibration(tmp_path):
    """The shipped calibration with ``supported_at`` raised to 1: every answer is flagged."""
    path = tmp_path / "strict.json"
    shipped = CalibrationFile.read(SHIPPED)
    CalibrationFile(models=shipped.models, fingerprints=shipped.fingerprints, fitted_on=shipped.fitted_on,
                    n_rows=shipped.n_rows, held_out=shipped.held_out, supported_at=1.0).save(path)
    return path


def test_an_unsupported_answer_prints_one_caution_line_and_says_so_in_json(tmp_path, strict_calibration):
    doc = tmp_path / "harbour.txt"
    doc.write_text(HARBOUR + KEEPER + HARBOUR)
    r = run("ask", "Who keeps the lighthouse on Gull Rock?", "--context", str(doc), "--method", "op",
            "--calibration", str(strict_calibration), "--no-cache")
    assert r.returncode == 0, r.stderr
    assert "Ada Brun" in r.stdout
    cautions = [line for line in r.stderr.splitlines() if line.startswith("caution:")]
    assert len(cautions) == 1 and "likely wrong (confidence 0." in cautions[0] and "--prefer quality" in cautions[0]
    assert "[harbour.txt" in r.stderr  # the passage that states it is still cited

    j = run("ask", "Who keeps the lighthouse on Gull Rock?", "--context", str(doc), "--method", "op",
            "--calibration", str(strict_calibration), "--json")
    out = json.loads(j.stdout)
    assert out["supported"] is False and 0 < out["confidence"] < 1
    assert out["citations"] and all("Ada Brun" in c["quote"] for c in out["citations"])


def test_with_the_shipped_calibration_supported_follows_the_confidence(tmp_path):
    doc = tmp_path / "harbour.txt"
    doc.write_text(HARBOUR + KEEPER + HARBOUR)
    out = json.loads(run("ask", "Who keeps the lighthouse on Gull Rock?", "--context", str(doc), "--method", "op",
                         "--json").stdout)
    assert out["supported"] == (out["confidence"] >= CalibrationFile.read(SHIPPED).supported_at)
