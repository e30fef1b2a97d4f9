"""Text without spaces between words (Chinese, Japanese, Thai): chunk sizes, BM25 words and answer overlap,
on hand-checked cases."""

from __future__ import annotations

import pytest

from ragfunnel.metrics import normalize_answer, token_f1
from ragfunnel.retrieve.bm25 import BM25Index, tokenize
from ragfunnel.text import chunk_words
from ragfunnel.text.chunking import count_words
from ragfunnel.text.scripts import words_for_search


def test_each_chinese_character_is_one_word_unit():
    assert count_words("财政总收入63.73亿元") == 5 + 1 + 2  # 财政总收入 · 63.73 · 亿元
    assert count_words("GPT-4模型，很好。") == 1 + 2 + 1 + 2 + 1  # punctuation marks count as characters
    assert count_words("The ferry leaves at nine.") == 5  # English as before
    assert count_words("ひらがなカタカナ") == 8


def test_a_thai_run_counts_in_groups_of_four_letters():
    assert count_words("สวัสดีครับ") == 3  # 10 letters: 4 + 4 + 2


def test_chinese_chunks_are_exact_slices_in_order():
    text = "铜仁市的财政总收入增长了百分之二十五。\n公共财政收入也增长了。"
    chunks = chunk_words(text, chunk_words=10)
    assert [c.text for c in chunks] == ["铜仁市的财政总收入增", "长了百分之二十五。\n公", "共财政收入也增长了。"]
    assert [c.n_words for c in chunks] == [10, 10, 10]
    assert all(text[c.start:c.start + len(c.text)] == c.text for c in chunks)


def test_mixed_language_text_chunks_both_scripts():
    text = "Revenue rose 25% in 2012. 2012年财政总收入增长25.89%。"
    (one,) = chunk_words(text, chunk_words=100)
    assert one.n_words == 5 + 1 + 8 + 1 + 1  # five English words, 2012, 年财政总收入增长, 25.89%, 。


def test_bm25_words_of_chinese_text():
    terms = tokenize(["2012年，铜仁市的财政总收入增长了25.89%。"])[0]
    assert {"财政", "收入", "总收入", "增长", "2012", "25", "89"} <= set(terms)
    assert "的" not in terms and "了" not in terms  # Chinese stopwords, like English ones
    assert tokenize(["The ferries left"])[0] == ["ferri", "left"]  # English unchanged: stemmed, stopwords out


def test_bigrams_when_jieba_is_absent(monkeypatch):
    from ragfunnel.text import scripts

    monkeypatch.setattr(scripts, "_jieba_cut", lambda: None)
    assert words_for_search("财政收入 up") == " 财政 政收 收入  up"
    assert words_for_search("税") == " 税 "


def test_bm25_finds_the_chinese_passage_that_answers():
    chunks = ["公共财政收入36.57亿元，增长28.73%。", "全市森林覆盖率达到19.01%。", "城镇居民人均可支配收入16338元。"]
    index = BM25Index(chunks)
    assert index.top_k("森林覆盖率达到了多少？", 1)[0][0] == 1
    assert index.top_k("人均可支配收入是多少", 1)[0][0] == 2
    assert index.top_k("What was the forest cover? 森林", 1)[0][0] == 1  # a mixed-language query


def test_answer_overlap_counts_chinese_characters():
    assert normalize_answer("增长了25.89%。") == "增 长 了 2589"
    assert token_f1("增长25.89%", "2012年，铜仁市的财政总收入增长了25.89%。") == pytest.approx(1 / 3)  # 3 of 3 · 3 of 15
    assert normalize_answer("The Gull Rock ferry!") == "gull rock ferry"  # English as before
