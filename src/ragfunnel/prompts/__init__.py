"""Task prompts written for ragfunnel, and parsing of what models reply."""

from ragfunnel.prompts.parsing import clean_answer, is_unanswerable, parse_sample
from ragfunnel.prompts.templates import TASKS, VARIANTS, build_prompt, check_task, prompt_prefix

__all__ = ["TASKS", "VARIANTS", "build_prompt", "check_task", "clean_answer", "is_unanswerable", "parse_sample",
           "prompt_prefix"]
