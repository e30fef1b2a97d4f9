"""Official LongBench / HotpotQA scores, each expected value worked out by hand from the published rules."""

import random
import sys

import pytest

from ragfunnel.errors import ConfigError, InputError, MissingExtra
from ragfunnel.eval import official_metrics
from ragfunnel.eval.official_metrics import LONGBENCH_METRICS, hotpotqa_scores, longbench_metric, longbench_score

TREC_CLASSES = ["Location", "Person", "Number"]


# Dataset table.


def test_table_has_the_21_datasets_and_the_longbench_e_names():
    assert len(LONGBENCH_METRICS) == 21
    assert longbench_metric("multifieldqa_zh") == "qa_f1_zh"
    assert longbench_metric("vcsum") == "rouge_zh"
    assert longbench_metric("qasper_e") == "qa_f1"
    assert longbench_metric("repobench-p_e") == "code_sim"


@pytest.mark.parametrize("name", ["narrative_qa", "narrativeqa_e"])  # a typo; a dataset LongBench-E lacks
def test_unknown_dataset_names_the_valid_ones(name):
    with pytest.raises(ConfigError, match="narrativeqa.*qasper_e"):
        longbench_score(name, "x", ["x"])


# qa_f1: SQuAD normalisation, token F1, best reference.


def test_qa_f1_ignores_case_articles_and_punctuation():
    assert longbench_score("hotpotqa", "The Eiffel Tower!", ["eiffel tower"]) == 1.0
    # [eiffel tower in paris] vs [eiffel tower]: P = 2/4, R = 2/2, F1 = 2·.5·1/1.5 = 2/3
    assert longbench_score("2wikimqa", "the Eiffel Tower in Paris", ["Eiffel Tower"]) == pytest.approx(2 / 3)


def test_the_best_reference_counts():
    # vs "Obama": P 1/2, R 1 → 2/3; vs "Michelle Obama": 1/2, 1/2 → 1/2; vs "Barack Hussein Obama": 1, 2/3 → 4/5
    refs = ["Obama", "Michelle Obama", "Barack Hussein Obama"]
    assert longbench_score("musique", "Barack Obama", refs) == pytest.approx(0.8)
    assert longbench_score("musique", "Barack Obama", []) == 0.0


# First line only for trec, triviaqa, samsum, lsht.


def test_few_shot_tasks_keep_only_the_first_line():
    # "Location" alone after the cut (leading newlines dropped first); whole, it would also name "Person" → 1/2
    assert longbench_score("trec", "\n\nLocation\nPerson", ["Location"], TREC_CLASSES) == 1.0
    assert longbench_score("trec_e", "\n\nLocation\nPerson", ["Location"], TREC_CLASSES) == 1.0
    assert longbench_score("triviaqa", "Paris\nthe capital", ["Paris"]) == 1.0


def test_other_tasks_score_the_whole_prediction():
    # [paris capital] vs [paris]: P = 1/2, R = 1 → 2/3
    assert longbench_score("narrativeqa", "Paris\nthe capital", ["Paris"]) == pytest.approx(2 / 3)


# classification.


def test_classification_gives_partial_credit_for_several_classes():
    assert longbench_score("trec", "Location or Person", ["Location"], TREC_CLASSES) == 0.5  # 1/2 classes named
    assert longbench_score("trec", "Person", ["Location"], TREC_CLASSES) == 0.0


def test_classification_drops_classes_that_are_part_of_the_reference():
    # named [event, sport event]; "event" is inside the reference "sport event" → dropped → 1/1
    assert longbench_score("trec", "sport event", ["sport event"], ["event", "sport event"]) == 1.0


def test_classification_keeps_the_class_after_each_dropped_one():
    # named [sport, event, sport event]; eval.py removes "sport" while iterating, so the loop jumps past "event"
    # to "sport event" (kept: it is the reference). [event, sport event] remain → 1/2, where dropping both
    # parts would give 1.
    classes = ["sport", "event", "sport event"]
    assert longbench_score("lsht", "sport event", ["sport event"], classes) == 0.5


def test_classification_needs_the_class_list():
    with pytest.raises(InputError, match="all_classes"):
        longbench_score("trec", "Location", ["Location"])


# retrieval and count: the share of the numbers in the prediction that are right.


def test_retrieval_english():
    assert longbench_score("passage_retrieval_en", "Paragraph 3, not Paragraph 12", ["Paragraph 3"]) == 0.5  # [3, 12]
    assert longbench_score("passage_retrieval_en", "Paragraph 3", ["Paragraph 3"]) == 1.0
    assert longbench_score("passage_retrieval_en", "the third one", ["Paragraph 3"]) == 0.0  # no numbers
    with pytest.raises(InputError, match="Paragraph"):
        longbench_score("passage_retrieval_en", "3", ["3"])


def test_retrieval_chinese():
    assert longbench_score("passage_retrieval_zh", "答案是段落5", ["段落5"]) == 1.0  # [5]
    assert longbench_score("passage_retrieval_zh", "段落5和段落15", ["段落5"]) == 0.5  # [5, 15]


def test_count_with_several_numbers():
    prediction = "There are 3 unique paragraphs out of 10, so 3."
    assert longbench_score("passage_count", prediction, ["3"]) == pytest.approx(2 / 3)  # [3, 10, 3]: 2 of 3


# code_sim: the first line that is no fence or comment, fuzzywuzzy's ratio on difflib, / 100.


def test_code_sim_skips_fence_and_comment_lines():
    # "x = foo(1)" vs "x = foo(2)": blocks "x = foo(" and ")", 9 chars of 20 → 2·9/20 = 90 → 0.9
    assert longbench_score("lcc", "```python\n# set up\nx = foo(1)\n```", ["x = foo(2)"]) == 0.9
    assert longbench_score("repobench-p", "// js\nx = foo(1)", ["x = foo(2)"]) == 0.9
    assert longbench_score("lcc", "\n\nx = foo(2)", ["x = foo(2)"]) == 1.0  # leading newlines are dropped


def test_code_sim_takes_a_blank_line_when_it_comes_first():
    # lines ["```", "", "x = foo(2)"]: "" has no marker, so it is the prediction → ratio 0
    assert longbench_score("lcc", "```\n\nx = foo(2)", ["x = foo(2)"]) == 0.0
    # but equal strings score 100 before the empty check: "" vs "" → 1.0
    assert longbench_score("lcc", "# only a comment", [""]) == 1.0


def test_code_sim_is_difflib_matching_blocks_not_levenshtein():
    # difflib takes the longest block "WXYZ" first, which leaves nothing on either side: 2·4/22 = 36.4 → 36.
    # An LCS/InDel ratio (python-Levenshtein) would find "abcdef": 2·6/22 → 55.
    assert longbench_score("lcc", "abc1defWXYZ", ["WXYZabc2def"]) == 0.36
    # 1 char of 16 → 12.5, and round() halves to even → 12
    assert longbench_score("lcc", "abcdefgh", ["aXXXXXXX"]) == 0.12


# rouge: the `rouge` package's ROUGE-L F; distinct words, F = 2PR/(P+R+1e-8).


def test_rouge_f_carries_the_epsilon():
    # P = R = 1: 2·1/(2 + 1e-8) = 1/(1 + 5e-9) ≈ 1 − 5e-9
    assert longbench_score("gov_report", "the cat sat", ["the cat sat"]) == pytest.approx(0.999999995, abs=1e-15)


def test_rouge_counts_distinct_words():
    # reference words {the, cat, lay, on, mat} (5), prediction {the, cat, sat, on, mat} (5); the LCS
    # "the cat on the mat" has the distinct words {the, cat, on, mat} (4): P = R = 4/5,
    # F = 2·.64/(1.6 + 1e-8) ≈ .8 − 5e-9. Token-level ROUGE-L (LCS 5 of 6 words each) would give 5/6.
    score = longbench_score("qmsum", "the cat sat on the mat", ["the cat lay on the mat"])
    assert score == pytest.approx(0.799999995, abs=1e-15)


def test_rouge_unions_lcs_words_over_sentences():
    # sentences split on ".": reference [the cat sat | the dog ran], prediction [the dog sat | a cat ran].
    # reference 1: LCS with "the dog sat" is {the, sat}, with "a cat ran" {cat} → union {the, sat, cat};
    # reference 2: {the, dog} and {ran} → union adds {dog, ran} ("the" is already in it) → 5 words.
    # m = |{the, cat, sat, dog, ran}| = 5, n = |{the, dog, sat, a, cat, ran}| = 6: R = 1, P = 5/6,
    # F = (5/3)/(11/6 + 1e-8) = (10/11)/(1 + 6e-8/11) ≈ 10/11 − 4.9587e-9
    score = longbench_score("multi_news", "the dog sat. a cat ran.", ["the cat sat. the dog ran."])
    assert score == pytest.approx(10 / 11 - 4.958677686e-9, abs=1e-15)


def test_rouge_of_an_empty_prediction_is_zero():
    assert longbench_score("samsum", "", ["the cat sat"]) == 0.0
    assert longbench_score("samsum", "...", ["the cat sat"]) == 0.0  # only empty sentences


def test_rouge_is_zero_where_the_package_recursion_overflows():
    # reference "a", prediction "a b b … b" (one sentence): m = 1, n = |{a, b}| = 2, overlap {a}: R = 1, P = 1/2,
    # F = 1/(1.5 + 1e-8) ≈ 2/3 − 4.44e-9. Backtracking from (1, N + 1) steps back over the N b's, matches "a",
    # and ends at (0, 0): N + 2 recursive calls, of which eval.py's stack has room for 990.
    assert longbench_score("gov_report", "a" + " b" * 988, ["a"]) == pytest.approx(2 / 3 - 4.444444e-9, abs=1e-15)
    assert longbench_score("gov_report", "a" + " b" * 989, ["a"]) == 0.0


def test_rouge_matches_the_rouge_package():
    rouge = pytest.importorskip("rouge").Rouge()
    rng = random.Random(0)
    pieces = ["the", "cat", "sat", "a", "b", ".", " ", "  ", ". ", "\n"]
    for _ in range(300):
        pred = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 20)))
        ref = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 20)))
        try:
            expected = rouge.get_scores([pred], [ref], avg=True)["rouge-l"]["f"]
        except Exception:  # as eval.py: whatever the package raises scores 0
            expected = 0.0
        assert longbench_score("gov_report", pred, [ref]) == expected, (pred, ref)


# Chinese: jieba words.


def test_qa_f1_zh():
    pytest.importorskip("jieba")
    # [会议 讨论 了 预算 问题] ("。" is dropped) vs [会议 讨论 了 预算]: P = 4/5, R = 1 → 8/9
    assert longbench_score("multifieldqa_zh", "会议讨论了预算问题。", ["会议讨论了预算"]) == pytest.approx(8 / 9)
    # LongBench's punctuation list has "》" but not "《": [《 红楼梦] vs [红楼梦] → P = 1/2, R = 1 → 2/3
    assert longbench_score("multifieldqa_zh", "《红楼梦》", ["红楼梦"]) == pytest.approx(2 / 3)


def test_rouge_zh():
    pytest.importorskip("jieba")
    # [我 爱 北京] vs [我 爱 北京 天安门]: P = 1, R = 3/4, F = 1.5/(1.75 + 1e-8) ≈ 6/7 − 4.898e-9
    score = longbench_score("dureader", "我爱北京", ["我爱北京天安门"])
    assert score == pytest.approx(6 / 7 - 4.897959e-9, abs=1e-15)
    # rouge_zh_score is one frame deeper in eval.py: room for 989 calls
    assert longbench_score("vcsum", "a" + " b" * 987, ["a"]) > 0.6
    assert longbench_score("vcsum", "a" + " b" * 988, ["a"]) == 0.0


def test_missing_jieba_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jieba", None)
    official_metrics._jieba.cache_clear()
    with pytest.raises(MissingExtra, match=r"ragfunnel\[eval\]"):
        longbench_score("multifieldqa_zh", "北京", ["北京"])
    official_metrics._jieba.cache_clear()


# HotpotQA.


def test_hotpot_yes_no_must_match_exactly():
    assert hotpotqa_scores("yes", ["no"]) == {"f1": 0.0, "em": 0.0}
    assert hotpotqa_scores("Yes.", ["yes"]) == {"f1": 1.0, "em": 1.0}
    # the reference is "yes" and the prediction differs → F1 0, where LongBench's qa_f1 gives
    # P = 1/3, R = 1 → 0.5 for the same pair
    assert hotpotqa_scores("yes and no", ["yes"]) == {"f1": 0.0, "em": 0.0}
    assert longbench_score("hotpotqa", "yes and no", ["yes"]) == 0.5
    assert hotpotqa_scores("no", ["no way"])["f1"] == 0.0  # a bare "no" earns nothing either (qa_f1: 2/3)


def test_hotpot_token_f1_and_best_reference():
    # [eiffel tower in paris] vs [eiffel tower]: P = 1/2, R = 1 → 2/3
    assert hotpotqa_scores("the Eiffel Tower in Paris", ["Eiffel Tower"]) == {"f1": pytest.approx(2 / 3), "em": 0.0}
    assert hotpotqa_scores("Eiffel Tower", ["Paris", "the Eiffel Tower"]) == {"f1": 1.0, "em": 1.0}
    assert hotpotqa_scores("Eiffel Tower", []) == {"f1": 0.0, "em": 0.0}
