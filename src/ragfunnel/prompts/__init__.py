"""Task prompts written for ragfunnel, and parsing of what models reply."""

from ragfunnel.prompts.parsing import chosen_option, clean_answer, is_unanswerable, parse_sample
from ragfunnel.prompts.templates import (
    TASKS,
    VARIANTS,
    answer_tokens,
    build_prompt,
    check_task,
    prompt_prefix,
    task_kind,
)

__all__ = ["TASKS", "VARIANTS", "answer_tokens", "build_prompt", "check_task", "chosen_option", "clean_answer",
           "is_unanswerable", "parse_sample", "prompt_prefix", "task_kind"]
