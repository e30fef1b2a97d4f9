"""Small corpora about Gull Rock, and the shared Wikipedia excerpt."""

from ragfunnel.types import Document
from tests.conftest import SHARED

WIKI = SHARED / "wikipedia_links_gensim" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"

DOCS = [
    Document("gull", "Gull Rock", "The lighthouse on Gull Rock was built of granite in 1871. " * 3, ("Martha Quill",)),
    Document("quill", "Martha Quill", "Martha Quill kept the Gull Rock light. She wrote diaries about puffins.",
             ("Gull Rock",)),
    Document("ferry", "Port Ellis", "The island ferry runs twice daily from Port Ellis harbour."),
    Document("mill", "Ellis Mill", "The mill at Port Ellis ground barley until 1930."),
]


def corpus():
    return [Document("a", "Gull Rock", "The lighthouse on Gull Rock was built of granite."),
            Document("b", "Martha Quill", "Martha Quill kept the Gull Rock light for thirty years."),
            Document("c", "Seabirds", "Puffins and gannets nest on the cliffs every spring."),
            Document("d", "Port Ellis", "Port Ellis is the harbour town where Martha Quill was born.")]
