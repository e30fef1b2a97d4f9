"""Text in scripts written without spaces between words (Chinese, Japanese, Thai ...).

Two things depend on finding words: chunking counts them, and BM25 matches them. Whitespace finds neither
in such text (a Chinese paragraph is one "word" of hundreds of characters), so:

- **a word unit** (what chunk sizes count) is one ideographic or kana character, up to
  :data:`SYLLABLES_PER_UNIT` letters of a Southeast Asian script written without spaces, or else a
  whitespace-separated word. A Chinese character is about 0.7 tokens of the Qwen and Llama vocabularies, an
  English word about 1.3, so a chunk of Chinese holds fewer tokens than one of English, never more.
- **words for search**: runs of Han characters and kana are cut into words by jieba (search mode: a long word
  and the shorter words inside it) when it is installed, else into overlapping character pairs (bigrams, as
  Lucene's CJK analyzer does). The same cut is made of chunks and queries.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from functools import lru_cache

# Han (with extensions and compatibility forms), kana, bopomofo, CJK punctuation and full-width forms; not
# U+3000, the ideographic space, which is whitespace.
IDEOGRAPHIC = ("\u2e80-\u2fdf\u3001-\u303f\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u31f0-\u31ff"
               "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f")
# Thai, Lao, Myanmar, Khmer: alphabets whose words run together.
UNSPACED_ALPHABETS = "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
SYLLABLES_PER_UNIT = 4
WORD_UNIT = re.compile(rf"[{IDEOGRAPHIC}]|[{UNSPACED_ALPHABETS}]{{1,{SYLLABLES_PER_UNIT}}}"
                       rf"|[^\s{IDEOGRAPHIC}{UNSPACED_ALPHABETS}]+")

# Characters that make words (punctuation and full-width symbols excluded).
_HAN_OR_KANA = "\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_HAN_RUN = re.compile(rf"[{_HAN_OR_KANA}]+")
HAN_CHARACTER = rf"[{_HAN_OR_KANA}]"
# Function words common enough to carry no evidence (the counterpart of English stopwords).
CHINESE_STOPWORDS = ("的", "了", "是", "在", "和", "与", "及", "或", "也", "都", "就", "而", "之", "其", "这",
                     "那", "为", "以", "于", "对", "等", "被", "把", "将", "个", "吗", "呢", "吧", "啊", "哪些",
                     "什么", "多少", "怎么", "如何", "为什么", "是否")


def has_han_or_kana(text: str) -> bool:
    return _HAN_RUN.search(text) is not None


def words_for_search(text: str) -> str:
    """``text`` with each run of Han characters and kana cut into words separated by spaces."""
    if not _HAN_RUN.search(text):
        return text
    return _HAN_RUN.sub(lambda run: " " + " ".join(_segment(run.group())) + " ", text)


def _segment(run: str) -> Iterable[str]:
    cut = _jieba_cut()
    if cut is not None:
        return cut(run)
    if len(run) == 1:
        return [run]
    return [run[i:i + 2] for i in range(len(run) - 1)]


@lru_cache(maxsize=1)
def _jieba_cut():
    """jieba's search-mode cut, or None when jieba is not installed (then: character bigrams)."""
    try:
        import jieba
    except ImportError:
        return None
    jieba.setLogLevel(logging.WARNING)  # its own logger prints a notice as it builds its dictionary
    return jieba.lcut_for_search
