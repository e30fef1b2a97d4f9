"""The cost model behind ``auto``: speeds, predicted seconds and the choice, on hand-made numbers."""

from __future__ import annotations

import pytest

from ragfunnel.errors import ConfigError
from ragfunnel.llm.fake import FakeLLM
from ragfunnel.llm.speed import SLOWDOWN_FLOOR, SpeedProfile, _fit_reading
from ragfunnel.methods import make_method
from ragfunnel.methods.auto import Auto
from ragfunnel.methods.config import AutoConfig

WORDS = " ".join(f"word{i}" for i in range(3000))


def test_reading_and_writing_seconds_by_hand():
    s = SpeedProfile(prefill_tps=100, decode_tps=10, batch_step_cost=0.25, slowdown_tokens=1000)
    # (1000 + 1000^2 / 2000) / 100 = 15 s; the second thousand tokens read slower: (1000 + (4e6 - 1e6) / 2000) / 100
    assert s.read_seconds(1000) == pytest.approx(15.0)
    assert s.read_seconds(1000, already=1000) == pytest.approx(25.0)
    assert s.read_seconds(0) == 0.0
    assert s.write_seconds(20) == pytest.approx(2.0)
    assert s.write_seconds(20, sequences=5) == pytest.approx(2.0 * (1 + 0.25 * 4))


def test_fit_reading_recovers_rate_and_slowdown():
    truth = SpeedProfile(prefill_tps=200, decode_tps=10, slowdown_tokens=6000)
    reads = [(n, truth.read_seconds(n)) for n in (200, 1000)]
    rate, slowdown = _fit_reading(reads)
    assert rate == pytest.approx(200, rel=1e-6) and slowdown == pytest.approx(6000, rel=1e-6)
    # reads that show no slowdown (noise), or too steep a one, give the measured floor
    assert _fit_reading([(200, 1.0), (1000, 4.0)])[1] == SLOWDOWN_FLOOR
    assert _fit_reading([(200, 1.0), (1000, 20.0)])[1] == SLOWDOWN_FLOOR


def planned(max_seconds=None, light_speed=None, strong_speed=None):
    light, strong = FakeLLM(lambda p, i: "x", name="light", context_window=8192), \
        FakeLLM(lambda p, i: "x", name="strong", context_window=8192)
    auto = Auto(AutoConfig(budget=500, chunk_words=100, max_seconds=max_seconds), light=light, strong=strong)
    speeds = {"light": light_speed or SpeedProfile(400, 40, 0.2, 10_000),
              "strong": strong_speed or SpeedProfile(100, 10, 0.2, 10_000)}
    return auto.plan("Which word?", WORDS, speeds=speeds)


def test_plan_predicts_each_method_from_token_counts():
    plan = planned()
    # FakeLLM counts whitespace words: 3000 context tokens, the prompt's own words on top
    assert plan.predicted_seconds["op"] < plan.predicted_seconds["fb"]  # fb pays op's read and the drafts
    assert plan.predicted_seconds["lc"] > plan.predicted_seconds["op"]
    assert plan.method == "op" and "cheapest" in plan.why and plan.ladder == ()  # balanced does not climb


def test_op_goes_first_and_a_warm_document_starts_with_lc():
    auto = Auto(AutoConfig(), light=FakeLLM(lambda p, i: "x"), strong=FakeLLM(lambda p, i: "x"))
    assert auto._choose({"lc": 10.0, "fb": 40.0, "op": 12.0}).method == "op"  # a cold lc, however fast
    warm = auto._choose({"lc": 2.0, "fb": 40.0, "op": 12.0}, lc_warm=True)
    assert warm.method == "lc" and "holds this document" in warm.why
    best_warm = Auto(AutoConfig(prefer="quality"), light=FakeLLM(lambda p, i: "x"), strong=FakeLLM(lambda p, i: "x"))
    assert best_warm._choose({"lc": 2.0, "fb": 40.0, "op": 12.0}, lc_warm=True).ladder == ("op", "fb")
    assert auto._choose({"lc": 20.0, "fb": 40.0, "op": 12.0}, lc_warm=True).method == "op"  # warm, still slower
    best = Auto(AutoConfig(prefer="quality"), light=FakeLLM(lambda p, i: "x"), strong=FakeLLM(lambda p, i: "x"))
    assert best._choose({"lc": 30.0, "fb": 40.0, "op": 12.0}).ladder == ("fb", "lc")
    fast = Auto(AutoConfig(prefer="speed"), light=FakeLLM(lambda p, i: "x"), strong=FakeLLM(lambda p, i: "x"))
    assert fast._choose({"lc": 30.0, "fb": 40.0, "op": 12.0}).ladder == ()


def test_max_seconds_falls_back_to_op_or_names_the_fastest():
    plan = planned()
    op = plan.predicted_seconds["op"]
    assert planned(max_seconds=op + 0.5).method == "op"
    with pytest.raises(ConfigError, match=r"the fastest, op, is predicted at \d+\.\ds"):
        planned(max_seconds=op / 2)


def test_auto_runs_its_choice_and_says_so_in_the_trace():
    light = FakeLLM(lambda p, i: "Rationale: word7 word8\nAnswer: word7", name="light", context_window=8192)
    strong = FakeLLM(lambda p, i: "word7", name="strong", context_window=8192)
    auto = make_method("auto", light=light, strong=strong, budget=500, chunk_words=100)
    import ragfunnel.llm.speed as speed

    speed._measured.update({"FakeLLM:light": SpeedProfile(400, 40), "FakeLLM:strong": SpeedProfile(100, 10)})
    p = auto.run("Which word?", WORDS)
    first = p.trace.stages[0]
    assert first.name == "choose" and set(first.detail["predicted_seconds"]) == {"lc", "op", "fb"}
    assert p.method == f"auto:{first.detail['chose']}" and p.answer == "word7"


def test_bad_options_fail_before_any_model_runs():
    with pytest.raises(ConfigError, match="max_seconds"):
        make_method("auto", max_seconds=0)
    with pytest.raises(ConfigError, match="draft_from"):
        make_method("fb", draft_from="sometimes")
    light = FakeLLM(lambda p, i: "never", name="l")
    strong = FakeLLM(lambda p, i: "never", name="s")
    from ragfunnel.errors import InputError

    with pytest.raises(InputError, match="smaller than one chunk"):
        make_method("fb", light=light, strong=strong, budget=50, chunk_words=100).run("Which?", WORDS)
    assert light.calls == [] and strong.calls == []  # nothing drafted before the budget was refused


def test_stage1_budget_follows_the_final_budget():
    assert make_method("fb", budget=4000).config.stage1_budget == 8000
    assert make_method("fb", budget=500).config.stage1_budget == 3000


def test_a_document_asked_about_often_enough_is_read_whole_once():
    auto = Auto(AutoConfig(), light=FakeLLM(lambda p, i: "x"), strong=FakeLLM(lambda p, i: "x"))
    predicted = {"lc": 40.0, "fb": 30.0, "op": 12.0}  # op goes first until the ledger says otherwise
    assert auto._choose(predicted).method == "op"
    assert auto._choose(predicted, spent=35.0).method == "op"  # rent paid < price of reading
    plan = auto._choose(predicted, spent=45.0)
    assert plan.method == "lc" and "reading it now" in plan.why
    assert auto._choose({**predicted, "lc": 0.5}, lc_warm=True).method == "lc"


def test_the_ledger_adds_up_seconds_per_document():
    from ragfunnel.methods.auto import DocumentLedger

    ledger = DocumentLedger()  # the disk caches are off in tests: memory only
    ledger.add("a document", 10.0)
    ledger.add("a document", 5.5)
    assert ledger.spent("a document") == 15.5 and ledger.spent("another") == 0.0


@pytest.mark.parametrize("elsewhere", [{"host": "another-host"}, {"cpus": 64}, {"cpu": "Some Other CPU"},
                                       {"model": "0" * 64}, {}])
def test_a_speed_file_is_trusted_only_from_this_machine_and_this_model_file(tmp_path, monkeypatch, elsewhere):
    import json

    from ragfunnel.llm import speed

    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(speed, "_measured", {})
    measured = []
    monkeypatch.setattr(speed, "calibrate", lambda llm: measured.append(llm.name) or SpeedProfile(300, 30))
    llm = FakeLLM(lambda prompt, i: "1 2 3", name="fake-speed")
    path = speed._profile_path(llm)
    path.parent.mkdir(parents=True)
    machine = {**speed.machine_of(llm.fingerprint), **elsewhere}
    path.write_text(json.dumps({"machine": machine, "profile": {"prefill_tps": 100.0, "decode_tps": 10.0}}))
    profile = speed.speed_of(llm)
    if elsewhere:  # copied from another machine, or measured for another model file: measured again
        assert measured == ["fake-speed"] and profile.prefill_tps == 300
        assert json.loads(path.read_text())["machine"] == speed.machine_of(llm.fingerprint)
    else:
        assert measured == [] and profile.prefill_tps == 100
