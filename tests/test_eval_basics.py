import pytest

from ragfunnel.errors import InputError
from ragfunnel.eval.long_context import build_long_context
from ragfunnel.eval.metrics import best_over_references, exact_match, normalize_answer, token_f1
from ragfunnel.types import Document


def test_normalize_drops_articles_punctuation_and_case():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("An apple, a pear.") == "apple pear"


def test_token_f1_hand_computed():
    # pred tokens: [eiffel, tower, paris] ; ref: [eiffel, tower] -> P=2/3, R=1, F1=0.8
    assert token_f1("the Eiffel Tower, Paris", "Eiffel Tower") == pytest.approx(0.8)
    assert token_f1("", "Paris") == 0.0
    assert token_f1("London", "Paris") == 0.0


def test_exact_match_and_max_over_references():
    assert exact_match("The Beatles", "beatles") == 1.0
    assert best_over_references(token_f1, "Paris France", ["Lyon", "Paris"]) == pytest.approx(2 / 3)
    assert best_over_references(token_f1, "x", []) == 0.0


def test_long_context_is_deterministic_and_records_gold():
    own = [Document("a", "Gold A", "alpha " * 20), Document("b", "Gold B", "beta " * 20)]
    pool = [Document(f"d{i}", f"D{i}", "noise " * 30) for i in range(20)] + [Document("a2", "Gold A", "duplicate")]
    a = build_long_context(own, pool, target_words=200, seed=3)
    b = build_long_context(own, pool, target_words=200, seed=3)
    assert a == b and a.n_words >= 200
    assert sorted(a.passages[i].title for i in a.gold_positions) == ["Gold A", "Gold B"]
    assert [p.title for p in a.passages].count("Gold A") == 1


def test_long_context_pool_too_small():
    with pytest.raises(InputError, match="lower target_words"):
        build_long_context([Document("a", "A", "a b c")], [Document("b", "B", "d e f")], target_words=1000)
