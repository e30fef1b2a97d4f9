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


def _few_shot(name: str, intro: str, label: str, ask: str, style: str, **kwargs) -> TaskPrompt:
    """A set whose context is worked examples and whose input ends with its own cue ("Type:", "Summary:")."""
    return TaskPrompt(name, intro, label, ask, style, question_label=None, cue="", **kwargs)


_CODE = "Read the code below, then write the line of code that comes next."
_NEXT_LINE = dict(answer_tokens=64, first_line=False, cue="Next line of code:", verbatim=True)


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
               "Transcript", "Respond to the query from what was said in the meeting above.",
               "A few plain sentences are enough.", kind="summary", answer_tokens=512, first_line=False,
               question_label="Query"),
    TaskPrompt("multi_news", "You will read several news articles and then summarise them together.", "News",
               "Write one summary of all the news above, up to about a page long.", "Write plain prose.",
               kind="summary", answer_tokens=512, first_line=False, question_label="Request",
               default_question="Summarise the news."),
    TaskPrompt("vcsum", "你将读到一次会议的完整记录，然后概括这次会议。", "会议记录", "请概括上面这次会议的主要内容。",
               "用通顺的中文写几句话。", kind="summary", answer_tokens=512, first_line=False, question_label="要求",
               default_question="总结这次会议。"),
    _few_shot("trec", "You will sort a question into one of a fixed set of types. Labelled example questions come "
              "first.", "Examples", "The last question below is unlabelled; give it a type name used in the "
              "examples.", "Write the type name and nothing else.", answer_tokens=64),
    _few_shot("triviaqa", "You will answer a question from a passage. Worked examples of passages, questions and "
              "answers come first.", "Examples", "Answer the last question below the way the examples do.", _SHORT),
    _few_shot("samsum", "You will summarise a chat in one line. Example chats with their summaries come first.",
              "Examples", "Summarise the last chat below the way the examples do.", "Keep the summary to one line.",
              kind="summary", answer_tokens=128),
    _few_shot("lsht", "这项任务是给新闻分类。先给出几篇已标好类别的新闻作为示例。", "示例",
              "最后一篇新闻还没有标类别，请给出它的类别，类别名称须与示例中的一致。", "只写类别名称。",
              answer_tokens=64),
    TaskPrompt("passage_count", "You will read paragraphs, some of which repeat, and count the distinct ones.",
               "Paragraphs", "Count the paragraphs above, counting a repeated paragraph once.",
               "Write the count as a number and nothing else.", question_label="Request",
               default_question="Count the distinct paragraphs."),
    TaskPrompt("passage_retrieval_en", "You will read numbered paragraphs and then a summary; find the paragraph "
               "the summary was written from.", "Paragraphs", "Which paragraph above is the summary from?",
               'Reply with its label only, such as "Paragraph 1".', question_label="Summary"),
    TaskPrompt("passage_retrieval_zh", "每个段落前都标有编号。读完所有段落后，请指出最后给出的摘要是根据哪一段写成的。",
               "段落", "这段摘要是根据上面哪一段写成的？", "只写出编号，格式如“段落1”。", question_label="摘要"),
    TaskPrompt("lcc", _CODE, "Code", "Continue the code above.", "Write only the next line.",
               question_label="Request", default_question="Write the next line of code.", **_NEXT_LINE),
    TaskPrompt("repobench-p", _CODE, "Files", "The code below continues from the files above; continue it.",
               "Write only its next line.", question_label=None, **_NEXT_LINE),
]

PREFIX = "longbench/"
LONGBENCH_TASKS: dict[str, TaskPrompt] = {
    PREFIX + t.task: replace(t, task=PREFIX + t.task) for t in _DATASETS
}


# LongBench-E resamples these datasets by length ("qasper_e"); they keep the base dataset's task and metric.
LONGBENCH_E = ("qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "gov_report", "multi_news", "trec",
               "triviaqa", "samsum", "passage_count", "passage_retrieval_en", "lcc", "repobench-p")


def base_dataset(dataset: str) -> str | None:
    """The LongBench dataset a name stands for (LongBench-E's ``_e`` names included); None for other names."""
    if PREFIX + dataset in LONGBENCH_TASKS:
        return dataset
    base = dataset.removesuffix("_e")
    return base if dataset.endswith("_e") and base in LONGBENCH_E else None


def longbench_task(dataset: str | None) -> str | None:
    """The task of a LongBench dataset name; None for other names."""
    base = base_dataset(dataset) if dataset else None
    return PREFIX + base if base else None
