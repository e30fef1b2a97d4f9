"""Text without spaces between words (Chinese, Japanese, Thai): chunk sizes, BM25 words and answer overlap,
on hand-checked cases."""

from __future__ import annotations

import pytest

from ragfunnel.llm import FakeLLM
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
    # 3 of the answer's 3 words are among the reference's 15
    assert token_f1("增长25.89%", "2012年，铜仁市的财政总收入增长了25.89%。") == pytest.approx(1 / 3)
    assert normalize_answer("The Gull Rock ferry!") == "gull rock ferry"  # English as before


# Rows in LongBench's layout for its five Chinese datasets, long enough to need several chunks.
_REPORT = "".join(f"第{i}部分：本市第{i}项工程于{2000 + i}年开工，投资{i * 3}亿元，带动就业{i * 120}人。"
                  for i in range(1, 40))
_ZH_ROWS = {
    "multifieldqa_zh": {"input": "第17项工程投资了多少？", "context": _REPORT, "answers": ["51亿元。"]},
    "dureader": {"input": "第8项工程哪一年开工？", "context": "文章1\n" + _REPORT, "answers": ["2008年"]},
    "vcsum": {"input": "", "context": "主持人：今天讨论工程进度。\n" + _REPORT,
              "answers": ["会议讨论了各项工程的进度。"]},
    "lsht": {"input": "新闻：本市新建体育馆开放。", "context": "新闻：足球联赛开幕。\n类别：体育\n" + _REPORT,
             "answers": ["体育"], "all_classes": ["体育", "财经"]},
    "passage_retrieval_zh": {"input": "第二十三项工程的投资。",
                             "context": "".join(f"段落{i}：{_REPORT[i * 30:i * 30 + 60]}\n" for i in range(1, 30)),
                             "answers": ["段落23"]},
}


class CharTokens(FakeLLM):
    """A scripted model that counts tokens as a real tokenizer does on Chinese: about one per character."""

    def _count_tokens(self, text):
        return len(text)


@pytest.mark.parametrize("dataset", sorted(_ZH_ROWS))
def test_every_chinese_longbench_dataset_runs_on_every_method(tmp_path, dataset, monkeypatch):
    import json

    import ragfunnel.llm.speed as speed
    from ragfunnel.eval.datasets import load_dataset
    from ragfunnel.llm.speed import SpeedProfile
    from ragfunnel.methods import CONTEXT_METHODS, make_method

    data = tmp_path / f"{dataset}.jsonl"
    data.write_text(json.dumps({"_id": f"{dataset}-0", "dataset": dataset, **_ZH_ROWS[dataset]},
                               ensure_ascii=False) + "\n")
    (example,) = load_dataset(data).examples
    assert len(example.context) > 1500  # longer than the budget: every retrieving method must cut it
    light = CharTokens(lambda prompt, i: "Rationale: 第17项工程投资51亿元。\nAnswer: 51亿元", name="light",
                       context_window=32_768)
    strong = CharTokens(lambda prompt, i: "51亿元", name="strong", context_window=32_768)
    monkeypatch.setitem(speed._measured, "FakeLLM:light", SpeedProfile(400, 40))
    monkeypatch.setitem(speed._measured, "FakeLLM:strong", SpeedProfile(100, 10))
    for name in CONTEXT_METHODS:  # before: "the context budget of 1500 tokens is smaller than one chunk"
        prediction = make_method(name, task=example.task, light=light, strong=strong).run(example.question,
                                                                                          example.context)
        assert prediction.answer, name
        if not prediction.method.endswith("lc"):  # auto may pick LC: it reads the whole text
            assert 1 < len(prediction.chunks_used) and sum(
                strong.count_tokens(sc.chunk.text) for sc in prediction.chunks_used) <= 1500, name


@pytest.mark.model
def test_ask_over_a_chinese_pdf_cites_its_pages(tmp_path):
    import json

    from ragfunnel.api import answer_located
    from ragfunnel.documents import read_context
    from ragfunnel.llm.fake import FakeLLM
    from ragfunnel.methods import make_method
    from tests.helpers.cli import run
    from tests.helpers.documents import make_unicode_pdf

    pages = [_REPORT[:600], "附件：全市森林覆盖率达到19.01%，比上年提高两个百分点。" + _REPORT[600:900], _REPORT[900:]]
    pdf = make_unicode_pdf(tmp_path / "报告.pdf", pages)
    r = run("ask", "全市森林覆盖率达到了多少？", "--context", str(pdf), "--method", "op", "--strong", TINY,
            "--json", "--no-cache")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    if "19.01" in out["answer"]:
        assert out["citations"] and all(c["file"] == "报告.pdf" and c["page"] for c in out["citations"])
        assert 2 in {c["page"] for c in out["citations"]}
    else:  # the 135M often restates the question ("全市森林覆盖率达到多少？"): no passage states that
        assert out["citations"] == [] and out["citation_note"] == "no passage read states this answer"
    # The same PDF read and answered "19.01%" (a scripted model): cited to its file and the page holding it.
    located = read_context([pdf])
    answering = make_method("op", strong=FakeLLM(lambda prompt, i: "19.01%"), budget=1500)
    cited = answer_located(answering, "全市森林覆盖率达到了多少？", located).citations
    assert cited and {(c.file, c.page) for c in cited} == {("报告.pdf", 2)}


TINY = "bundled:smollm2-135m"


def test_a_chinese_answer_is_quoted_by_its_whole_sentence():
    from ragfunnel.documents import LocatedContext, cite
    from ragfunnel.types import Prediction, ScoredChunk, Trace

    text = "全市公路网总里程达到1.2万公里。全市森林覆盖率达到19.01%，比上年提高两个百分点。人口增长1.5%。"
    context = LocatedContext.of_text(text)
    chunks = [ScoredChunk(c, 1.0) for c in chunk_words(text, chunk_words=1000)]
    [citation] = cite(Prediction(answer="19.01%", method="op", chunks_used=chunks, trace=Trace()), context,
                      "森林覆盖率达到了多少？")
    assert citation.quote == "全市森林覆盖率达到19.01%，比上年提高两个百分点。"  # cut at 。, not at the decimal point
