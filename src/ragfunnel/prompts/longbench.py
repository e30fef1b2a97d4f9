"""LongBench's tasks as ragfunnel prompts: one per dataset, named ``longbench/<dataset>``.

Each follows the structure LongBench's prompts have (what the reader gets and must do, the text
under a label, the instruction again beside the question, an answer cue), in ragfunnel's own words,
with LongBench's answer-token limit per dataset. Datasets whose rows carry no question (reports to
summarise, code to continue) are asked their ``default_question``. Scoring is
:mod:`ragfunnel.eval.official_metrics`.
"""

from __future__ import annotations

from dataclasses import replace

from ragfunnel.prompts.task import TaskPrompt

_SHORT = "Reply with the answer only, as briefly as you can, and do not explain."
_PASSAGES = ("You will read several passages and then answer a question; the answer may need facts from "
             "more than one passage.")
_ZH_SHORT = "只写出答案，不要解释。"


def _multihop(name: str) -> TaskPrompt:
    return TaskPrompt(name, _PASSAGES, "Passages", "Using only the passages above, answer the question.", _SHORT)


def _code(name: str) -> TaskPrompt:
    return TaskPrompt(name, "You will read source code and then write the line that comes next.", "Code",
                      "Continue the code above.", "Reply with the next line of code only.", answer_tokens=64,
                      first_line=False, question_label="Code to continue",
                      default_question="Write the next line of code.")


_DATASETS = [
    TaskPrompt("narrativeqa", "You will read a story (a book or a film script) and then answer a question about it.",
               "Story", "Answer the question about the story above.",
               "Answer in a phrase if you can, as briefly as possible, without explaining.", answer_tokens=128),
    TaskPrompt("qasper", "You will read a scientific article and then answer a question about it.", "Article",
               "Answer the question using the article above.",
               'Use a single phrase or sentence if you can. If the article does not say, write "unanswerable"; '
               'answer a yes/no question with "yes", "no" or "unanswerable". Do not explain.',
               answer_tokens=128),
    TaskPrompt("multifieldqa_en", "You will read a text and then answer a question about it.", "Text",
               "Using the text above, answer the question.", _SHORT, answer_tokens=64),
    TaskPrompt("multifieldqa_zh", "请阅读下面的文本，然后用中文回答一个问题。", "文本", "请只根据上面的文本回答问题。",
               _ZH_SHORT, answer_tokens=64, question_label="问题"),
    _multihop("hotpotqa"),
    _multihop("2wikimqa"),
    _multihop("musique"),
    TaskPrompt("dureader", "请阅读下面的几篇文章，然后用中文回答一个问题。", "文章", "请根据上面的文章回答问题。",
               "回答要简洁。", answer_tokens=128, question_label="问题"),
    TaskPrompt("gov_report", "You will read a government report and then summarise it.", "Report",
               "Write a summary of the report above, up to about a page long.", "Write plain prose.", kind="summary",
               answer_tokens=512, first_line=False, question_label="Request",
               default_question="Summarise the report."),
    TaskPrompt("qmsum", "You will read a meeting transcript and then answer a query about the meeting.",
               "Transcript", "Using the transcript above, answer the query in one or more sentences.",
               "Write plain sentences.", kind="summary", answer_tokens=512, first_line=False, question_label="Query"),
    TaskPrompt("multi_news", "You will read several news articles and then summarise them together.", "News",
               "Write one summary of all the news above, up to about a page long.", "Write plain prose.",
               kind="summary", answer_tokens=512, first_line=False, question_label="Request",
               default_question="Summarise the news."),
    TaskPrompt("vcsum", "下面是一段会议记录，请阅读后用中文写一份总结。", "会议记录", "请为上面的会议写一份总结。",
               "用通顺的中文写几句话。", kind="summary", answer_tokens=512, first_line=False, question_label="要求",
               default_question="总结这次会议。"),
    TaskPrompt("trec", "You will decide which type a question belongs to. Example questions with their types "
               "come first.", "Examples", "Give the type of the last question, using one of the type names in the "
               "examples.", "Reply with the type name only.", answer_tokens=64),
    TaskPrompt("triviaqa", "You will answer a question from a passage. Example passages with their questions and "
               "answers come first.", "Examples", "Answer the last question in the same way as the examples.",
               _SHORT),
    TaskPrompt("samsum", "You will summarise a dialogue in one line. Example dialogues with their summaries come "
               "first.", "Examples", "Summarise the last dialogue in the same way as the examples.",
               "Write the summary on one line.", kind="summary", answer_tokens=128, question_label="Dialogue"),
    TaskPrompt("lsht", "请判断一篇新闻属于哪个类别。前面先给出一些新闻及其类别作为例子。", "例子",
               "请用例子里出现过的类别名称，判断最后这篇新闻的类别。", "只写出类别名称。", answer_tokens=64,
               question_label="新闻"),
    TaskPrompt("passage_count", "You will read paragraphs, some of which repeat, and count the distinct ones.",
               "Paragraphs", "How many distinct paragraphs are above once repeats are removed?",
               "Reply with a number only, such as 1, 2 or 3.", question_label="Request",
               default_question="Count the distinct paragraphs."),
    TaskPrompt("passage_retrieval_en", "You will read numbered paragraphs and then a summary; find the paragraph "
               "the summary was written from.", "Paragraphs", "Which paragraph above is the summary from?",
               'Reply with its label only, such as "Paragraph 1".', question_label="Summary"),
    TaskPrompt("passage_retrieval_zh", "下面是若干编号的段落和一段摘要，请找出这段摘要出自哪个段落。", "段落",
               "这段摘要出自上面的哪个段落？", "只写出段落编号，例如“段落1”。", question_label="摘要"),
    _code("lcc"),
    _code("repobench-p"),
]

PREFIX = "longbench/"
LONGBENCH_TASKS: dict[str, TaskPrompt] = {
    PREFIX + t.task: replace(t, task=PREFIX + t.task) for t in _DATASETS
}


def longbench_task(dataset: str | None) -> str | None:
    """The task of a LongBench dataset name (LongBench-E's ``_e`` names included); None for other names."""
    if not dataset:
        return None
    name = PREFIX + dataset.removesuffix("_e")
    return name if name in LONGBENCH_TASKS else None
