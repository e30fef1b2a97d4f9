"""What the embedder tests and the Ray-sharded embedding tests share."""

import pytest

from ragfunnel.types import Document

DOCS = [
    Document("gull", "Gull Rock", "The lighthouse on Gull Rock was built of granite in 1871.", ("Martha Quill",)),
    Document("quill", "Martha Quill", "Martha Quill kept the Gull Rock light. She wrote diaries about puffins."),
    Document("ferry", "Port Ellis", "The island ferry runs twice daily from Port Ellis harbour."),
    Document("mill", "Ellis Mill", "The mill at Port Ellis ground barley until 1930."),
]


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message
