"""InfiniteBench (∞Bench) English book tasks as ragfunnel prompts: ``infbench/en.qa`` and ``infbench/en.mc``.

In ragfunnel's words, in the layout of its other tasks; answers are limited to 64 tokens, the limit the
FB-RAG paper set for both from their answers' lengths.
"""

from __future__ import annotations

from ragfunnel.prompts.task import TaskPrompt

INFBENCH_TASKS: dict[str, TaskPrompt] = {
    t.task: t
    for t in [
        TaskPrompt("infbench/en.qa", "You will read a book and then answer a question about it.", "Book",
                   "Answer the question about the book above.", "Be brief: a few words, no explanation.",
                   answer_tokens=64),
        TaskPrompt("infbench/en.mc", "You will read a book and then pick the option that answers a question "
                   "about it.", "Book", "Pick the option that answers the question about the book above.",
                   "Reply with the option's letter and nothing else.", kind="choice", answer_tokens=64),
    ]
}
