"""Per-example scores exactly as the official LongBench and HotpotQA scorers compute them.

The rules follow THUDM/LongBench v1 (``LongBench/metrics.py``, ``LongBench/eval.py``) and hotpotqa/hotpot
(``hotpot_evaluate_v1.py``). A metric profile named after a benchmark must reproduce that benchmark's
numbers, so their quirks are kept on purpose; each one is commented where it happens. Chinese needs jieba
(the ``eval`` extra); ROUGE-L is written out here rather than taken from the ``rouge`` package (see below).
"""

from __future__ import annotations

import difflib
import logging
import re
import string
from functools import lru_cache, partial

from ragfunnel.errors import ConfigError, InputError, MissingExtra
from ragfunnel.metrics import best_over_references, exact_match, normalize_answer, overlap_f1, token_f1
from ragfunnel.prompts.longbench import LONGBENCH_E, base_dataset

# The metric eval.py scores each LongBench dataset with.
LONGBENCH_METRICS: dict[str, str] = {
    "narrativeqa": "qa_f1",
    "qasper": "qa_f1",
    "multifieldqa_en": "qa_f1",
    "multifieldqa_zh": "qa_f1_zh",
    "hotpotqa": "qa_f1",
    "2wikimqa": "qa_f1",
    "musique": "qa_f1",
    "dureader": "rouge_zh",
    "gov_report": "rouge",
    "qmsum": "rouge",
    "multi_news": "rouge",
    "vcsum": "rouge_zh",
    "trec": "classification",
    "triviaqa": "qa_f1",
    "samsum": "rouge",
    "lsht": "classification",
    "passage_retrieval_en": "retrieval",
    "passage_count": "count",
    "passage_retrieval_zh": "retrieval_zh",
    "lcc": "code_sim",
    "repobench-p": "code_sim",
}

# Few-shot tasks: the model tends to continue the pattern with more examples, so only its first line counts.
_FIRST_LINE_ONLY = frozenset({"trec", "triviaqa", "samsum", "lsht"})


def longbench_metric(dataset: str) -> str:
    """The metric LongBench scores ``dataset`` with ("qa_f1", "rouge", ...); LongBench-E names end in "_e"."""
    return LONGBENCH_METRICS[_base_dataset(dataset)]


def longbench_score(
    dataset: str, prediction: str, references: list[str], all_classes: list[str] | None = None
) -> float:
    """The example's score in [0, 1] as eval.py computes it before averaging and scaling by 100.

    The best score over ``references`` (0 when there are none); ``all_classes`` is the row's class list,
    needed by the classification datasets (trec, lsht).
    """
    base = _base_dataset(dataset)
    metric = LONGBENCH_METRICS[base]
    if base in _FIRST_LINE_ONLY:
        prediction = prediction.lstrip("\n").split("\n")[0]
    if metric == "classification":
        if all_classes is None:
            raise InputError(f"{dataset!r} is scored by classification: pass all_classes (the row's 'all_classes')")
        score_one = partial(_classification, all_classes=all_classes)
    else:
        score_one = _SCORERS[metric]
    return float(best_over_references(score_one, prediction, references))


def hotpotqa_scores(prediction: str, references: list[str]) -> dict[str, float]:
    """Answer F1 and EM as hotpot_evaluate_v1.py computes them, each the best over ``references``."""
    return {
        "f1": best_over_references(_hotpot_f1, prediction, references),
        "em": best_over_references(exact_match, prediction, references),
    }


def _base_dataset(dataset: str) -> str:
    base = base_dataset(dataset)
    if base is None:
        raise ConfigError(f"unknown LongBench dataset {dataset!r}; valid: {', '.join(LONGBENCH_METRICS)}; "
                          f"LongBench-E: {', '.join(f'{d}_e' for d in LONGBENCH_E)}")
    return base


# HotpotQA.

_YES_NO = frozenset({"yes", "no", "noanswer"})


def _hotpot_f1(prediction: str, reference: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(reference)
    # A yes/no answer on either side must match exactly: "yes and no" earns nothing against "yes".
    if pred != ref and (pred in _YES_NO or ref in _YES_NO):
        return 0.0
    return token_f1(prediction, reference)


# LongBench metrics, one reference at a time. English QA F1 is metrics.token_f1 (same normalisation).

# Chinese punctuation LongBench strips, as it lists it: note "》" is there but "《" is not.
_ZH_PUNCT = str.maketrans("", "", string.punctuation + (
    "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏."
))
_NUMBER = re.compile(r"\d+")


def _qa_f1_zh(prediction: str, reference: str) -> float:
    return overlap_f1(_zh_tokens(prediction), _zh_tokens(reference))


def _zh_tokens(text: str) -> list[str]:
    """jieba words, each lower-cased with punctuation and whitespace removed; words left empty are dropped."""
    words = ("".join(w.lower().translate(_ZH_PUNCT).split()) for w in _jieba().lcut(text))
    return [w for w in words if w]


def _rouge(prediction: str, reference: str) -> float:
    return _rouge_l(prediction, reference, _RECON_CALLS["rouge"])


def _rouge_zh(prediction: str, reference: str) -> float:
    jieba = _jieba()
    return _rouge_l(" ".join(jieba.lcut(prediction)), " ".join(jieba.lcut(reference)), _RECON_CALLS["rouge_zh"])


def _classification(prediction: str, reference: str, all_classes: list[str]) -> float:
    """1/k when the prediction names k classes, one of them the reference; 0 when it misses the reference."""
    named = [c for c in all_classes if c in prediction]
    # eval.py then drops the classes that are only part of the reference's name ("event" when the answer is
    # "sport event"), but removes them from the list it is iterating over: the class right after each removed
    # one is never looked at and stays. The index below moves on after a removal too, to keep that.
    i = 0
    while i < len(named):
        if named[i] in reference and named[i] != reference:
            del named[i]
        i += 1
    return 1.0 / len(named) if reference in named else 0.0


def _retrieval(prediction: str, reference: str, label: str = "Paragraph ") -> float:
    """Share of the numbers in the prediction that are the reference paragraph's number."""
    found = re.search(re.escape(label) + r"(\d+)", reference)
    if found is None:
        raise InputError(f"retrieval reference {reference!r} names no paragraph; expected e.g. '{label}3'")
    return _share_equal(prediction, found.group(1))


def _count(prediction: str, reference: str) -> float:
    """Share of the numbers in the prediction that equal the reference count."""
    return _share_equal(prediction, reference)


def _share_equal(prediction: str, wanted: str) -> float:
    numbers = _NUMBER.findall(prediction)
    return numbers.count(wanted) / len(numbers) if numbers else 0.0


def _code_sim(prediction: str, reference: str) -> float:
    """fuzz.ratio / 100 of the reference line and the prediction's first line that is not a fence or comment."""
    lines = prediction.lstrip("\n").split("\n")
    first = next((line for line in lines if not any(mark in line for mark in ("`", "#", "//"))), "")
    return _fuzz_ratio(first, reference) / 100


def _fuzz_ratio(a: str, b: str) -> int:
    """fuzzywuzzy 0.18's ``fuzz.ratio`` as LongBench runs it: on difflib, not on python-Levenshtein.

    LongBench installs plain ``fuzzywuzzy``, which falls back to ``difflib.SequenceMatcher`` (Ratcliff/Obershelp
    matching blocks, autojunk on) when python-Levenshtein is absent; with it, ratio would be an InDel distance
    ratio and give other numbers (THUDM/LongBench issue #96).
    """
    if a == b:  # fuzzywuzzy checks equality before emptiness: two empty strings score 100
        return 100
    if not a or not b:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))  # round() halves to even, as there


_SCORERS = {
    "qa_f1": token_f1,
    "qa_f1_zh": _qa_f1_zh,
    "rouge": _rouge,
    "rouge_zh": _rouge_zh,
    "retrieval": _retrieval,
    "retrieval_zh": partial(_retrieval, label="段落"),
    "count": _count,
    "code_sim": _code_sim,
}


# ROUGE-L as eval.py gets it from the `rouge` package (1.0.1): `Rouge().get_scores([pred], [ref], avg=True)`,
# "rouge-l", "f", or 0.0 where that raises. The package is not called but written out, because it backtracks
# each LCS recursively, one Python frame per step: a long sentence pair (a ~1000-word prediction with no ".",
# easy in Chinese, which ends sentences with "。") exceeds the recursion limit, and eval.py scores it 0.0. Run
# here, the package would hit that limit wherever the caller's stack happens to end; eval.py's own budget is
# fixed, so it is counted instead. The package's rules:
# - sentences are the text split on "."; a piece is dropped when empty *before* whitespace is squeezed, so
#   "a. " has the sentences "a" and ""; words are a squeezed sentence split on " ";
# - lengths count *distinct* words, and the overlap is the distinct words in the union of the LCSs of all
#   (reference sentence, prediction sentence) pairs, each LCS as the package backtracks it;
# - F = 2PR / (P + R + 1e-8): plain F1 but for the epsilon, so a perfect match scores 0.999999995;
# - an empty side raises (no sentences), scored 0.0.

# Frames on eval.py's stack when the package backtracks: <module>, scorer, rouge_score, get_scores,
# _get_avg_scores, the metric's lambda, rouge_l_summary_level, _union_lcs, _recon_lcs (via rouge_zh_score, 10).
# CPython's default limit is 1000, and on CPython 3.8-3.10, current at LongBench's 2023 release, the comparison
# in the deepest call takes one more (3.11+ fits one more step). Checked against that chain on 3.8, 3.9, 3.10.
_RECON_CALLS = {"rouge": 1000 - 9 - 1, "rouge_zh": 1000 - 10 - 1}


def _rouge_l(prediction: str, reference: str, max_calls: int) -> float:
    hyp, ref = _rouge_sentences(prediction), _rouge_sentences(reference)
    if not hyp or not ref:
        return 0.0
    overlap: set[str] = set()
    for ref_words in ref:
        for hyp_words in hyp:
            lcs = _backtracked_lcs(ref_words, hyp_words, max_calls)
            if lcs is None:
                return 0.0
            overlap.update(lcs)
    recall = len(overlap) / len({w for s in ref for w in s})
    precision = len(overlap) / len({w for s in hyp for w in s})
    return 2.0 * ((precision * recall) / (precision + recall + 1e-8))


def _rouge_sentences(text: str) -> list[list[str]]:
    return [" ".join(piece.split()).split(" ") for piece in text.split(".") if piece]


def _backtracked_lcs(ref: list[str], hyp: list[str], max_calls: int) -> list[str] | None:
    """The LCS words the package backtracks to, or None where its recursion would need over ``max_calls`` calls."""
    table = [[0] * (len(hyp) + 1) for _ in range(len(ref) + 1)]
    for i, r in enumerate(ref, start=1):
        above, row = table[i - 1], table[i]
        for j, h in enumerate(hyp, start=1):
            row[j] = above[j - 1] + 1 if r == h else max(above[j], row[j - 1])
    words, i, j, calls = [], len(ref), len(hyp), 1
    while i and j:
        calls += 1
        if calls > max_calls:
            return None
        if ref[i - 1] == hyp[j - 1]:
            words.append(ref[i - 1])
            i, j = i - 1, j - 1
        elif table[i - 1][j] > table[i][j - 1]:
            i -= 1
        else:  # ties step back in the prediction
            j -= 1
    return words


@lru_cache(maxsize=1)
def _jieba():
    try:
        import jieba
    except ImportError:
        raise MissingExtra("jieba", "eval") from None
    jieba.setLogLevel(logging.WARNING)  # it logs its dictionary loading to stderr at DEBUG
    return jieba
