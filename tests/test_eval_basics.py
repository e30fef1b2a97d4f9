import pytest

from ragfunnel.errors import InputError
from ragfunnel.eval.long_context import build_long_context, lengthen
from ragfunnel.metrics import (
    answer_rank,
    answer_recall_at_k,
    best_over_references,
    choice_accuracy,
    contains_answer,
    exact_match,
    gold_rank,
    gold_recall,
    normalize_answer,
    rouge_l,
    token_f1,
)
from ragfunnel.prompts import chosen_option
from ragfunnel.types import Document, Example


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


def test_lengthen_hides_an_examples_own_passages_and_needs_them():
    own = [Document("a", "Gold A", "alpha " * 20), Document("b", "Gold B", "beta " * 20)]
    pool = [Document(f"d{i}", f"D{i}", "noise " * 30) for i in range(20)]
    ex = Example(id="q1", question="Which?", context="short", answers=["alpha"], passages=own)
    long = lengthen(ex, pool, target_words=200, seed=1)
    assert long.context.count("Gold A\nalpha") == 1 and len(long.context.split()) >= 200
    assert [long.passages[i].title for i in long.meta["gold_passages"]] in (["Gold A", "Gold B"], ["Gold B", "Gold A"])
    assert lengthen(ex, pool, target_words=200, seed=1) == long != lengthen(ex, pool, target_words=200, seed=2)
    with pytest.raises(InputError, match="no separate passages"):
        lengthen(Example(id="q2", question="Which?", context="text", answers=["x"]), pool, target_words=200)


def test_long_context_pool_too_small():
    with pytest.raises(InputError, match=r"lower context_words below that"):
        build_long_context([Document("a", "A", "a b c")], [Document("b", "B", "d e f")], target_words=1000)


def test_contains_answer_respects_word_boundaries():
    assert contains_answer("It was the Eiffel Tower.", "eiffel tower") == 1.0
    assert contains_answer("Parisian", "Paris") == 0.0
    assert contains_answer("anything", "the") == 0.0  # reference normalises to nothing


def test_rouge_l_hand_computed():
    pytest.importorskip("rouge_score", reason="needs the [eval] extra")
    # LCS of "the cat sat on the mat" and "the cat is on the mat" is 5 of 6 tokens each way.
    assert rouge_l("the cat is on the mat", "the cat sat on the mat") == pytest.approx(5 / 6)
    assert rouge_l("", "something") == 0.0


def test_choice_accuracy():
    choices = ["a cat", "a dog", "a bird"]
    assert choice_accuracy("B", "B", choices) == 1.0
    assert choice_accuracy("The answer is B.", "B", choices) == 1.0
    assert choice_accuracy("A", "a dog", choices) == 0.0
    assert choice_accuracy("a dog", "B", choices) == 1.0
    assert choice_accuracy("", "B", choices) == 0.0
    assert choice_accuracy("I think the answer is C", "C", choices) == 1.0
    assert choice_accuracy("A good guess is B", "B", choices) == 1.0  # "A" here is the article
    assert choice_accuracy("Answer: (b)", "B", choices) == 1.0
    assert choice_accuracy("I would pick (C) over A", "C", choices) == 1.0
    assert choice_accuracy("Z", "A", choices) == 0.0 and choice_accuracy("Option Z, or A", "A", choices) == 1.0
    # The answer methods return is the option's own text, even when the text holds a capital letter.
    vitamins = ["Vitamin A", "Vitamin C", "Vitamin D"]
    assert choice_accuracy("Vitamin C", "B", vitamins) == 1.0
    assert choice_accuracy("Vitamin C", "Vitamin C", vitamins) == 1.0
    assert choice_accuracy("vitamin c.", "C", vitamins) == 0.0


def test_chosen_option_gives_the_options_text():
    choices = ["Paris", "Lyon", "Vitamin C"]
    assert chosen_option("B", choices) == "Lyon"
    assert chosen_option("The answer is (A).", choices) == "Paris"
    assert chosen_option("vitamin c", choices) == "Vitamin C"
    assert chosen_option("I cannot tell", choices) is None


def test_answer_recall_and_gold_rank():
    texts = ["nothing here", "born in Paris, France", "Paris again"]
    assert answer_recall_at_k(texts, ["Paris"], 1) == 0.0
    assert answer_recall_at_k(texts, ["Lyon", "paris"], 2) == 1.0
    assert answer_rank(texts, ["Lyon", "paris"]) == 2
    assert answer_rank(["The Parisian", "in Paris."], ["paris"]) == 2  # whole words only
    assert answer_rank(texts, ["Berlin"]) is None
    assert answer_rank(texts, [""]) is None  # an empty reference matches nothing


def test_gold_rank_and_recall_over_word_spans():
    ranked = [(20, 30), (0, 10), (10, 20), (30, 35)]  # chunks in score order
    gold = [(12, 18), (28, 33)]  # two supporting passages
    assert gold_rank(ranked, gold) == 1  # words 20-30 overlap the passage at 28-33
    assert gold_rank(ranked[1:], gold) == 2  # then 10-20 holds the first passage
    assert gold_rank([(0, 10), (18, 28)], gold) is None  # touching an edge is not overlapping
    assert gold_recall([(10, 20)], gold) == 0.5 and gold_recall(ranked, gold) == 1.0
    assert gold_recall([(0, 10)], gold) == 0.0 and gold_recall(ranked, []) == 0.0
