"""Citations name only passages that state the answer, best first, and say so when none read does."""

from ragfunnel.documents import NOT_STATED, LocatedContext, cite, cited
from ragfunnel.documents.citations import states
from ragfunnel.text import chunk_words
from ragfunnel.types import Prediction, ScoredChunk, Trace

TEXT = ("The lighthouse at Gull Rock was kept by Ada Brun from 1901. Storms closed the harbour twice.\n\n"
        "Fishing boats sailed each morning. Nets were mended on the quay in the evening.\n\n"
        "Ada Brun left the light in 1923, and her son Paul Brun kept it until 1950.")


def _prediction(answer, chunks):
    return Prediction(answer=answer, method="op", chunks_used=[ScoredChunk(c, 1.0) for c in chunks], trace=Trace())


def test_a_sentence_states_an_answer_by_its_words():
    assert states({"ada", "brun", "kept"}, {"ada", "brun"}, {"kept"})
    assert not states({"ada", "kept"}, {"ada", "brun"}, {"kept"})  # a two-word answer needs both words
    assert not states({"kim", "jong", "chul"}, {"kim", "jong", "suk"}, set())  # and a three-word one all three
    # three in five of a longer answer's words: 3 of 5 states it, 2 of 5 does not
    assert states({"a", "b", "c"}, {"a", "b", "c", "d", "e"}, set())
    assert not states({"a", "b"}, {"a", "b", "c", "d", "e"}, set())
    # a yes/no answer is stated by a third of the question's words, two at least
    assert states({"gull", "rock"}, {"yes"}, {"gull", "rock", "lighthouse", "storms", "keeper"}, yes_no=True)
    assert not states({"gull"}, {"yes"}, {"gull", "rock", "lighthouse", "storms"}, yes_no=True)


def test_only_the_chunks_that_state_the_answer_are_cited_best_first():
    context = LocatedContext.of_text(TEXT)
    chunks = chunk_words(TEXT, chunk_words=14)  # the fishing chunk says nothing of the keeper
    fishing = [c for c in chunks if "Fishing" in c.text]
    assert fishing
    citations = cite(_prediction("Ada Brun", chunks), context, "Who kept the Gull Rock light?")
    quotes = [c.quote for c in citations]
    assert quotes and all("Ada Brun" in q for q in quotes)
    assert not any("Fishing" in q or "Nets" in q for q in quotes)
    assert "Gull Rock" in quotes[0]  # shares the question's words too: best first


def test_an_initial_does_not_end_a_sentence():
    text = "Iowa joined the Union in 1846. It was signed by President James K. Polk in Washington."
    [citation] = cite(_prediction("James K. Polk", chunk_words(text, chunk_words=50)), LocatedContext.of_text(text),
                      "Who signed it?")
    assert citation.quote == "It was signed by President James K. Polk in Washington."
    text = "Others came later. The group was formed by S.M. Entertainment in 2008."
    [citation] = cite(_prediction("S.M. Entertainment", chunk_words(text, chunk_words=50)),
                      LocatedContext.of_text(text), "Who formed it?")
    assert citation.quote == "The group was formed by S.M. Entertainment in 2008."


def test_no_passage_read_states_the_answer():
    context = LocatedContext.of_text(TEXT)
    chunks = chunk_words(TEXT, chunk_words=14)
    fishing = [c for c in chunks if "Fishing" in c.text]
    citations, note = cited(_prediction("Ada Brun", fishing), context, "Who kept the Gull Rock light?")
    assert citations == [] and note == NOT_STATED == "no passage read states this answer"
    assert cited(_prediction("Ada Brun", chunks), context, "Who kept the light?")[1] is None
    assert cited(_prediction("Ada Brun", []), context, "Who kept the light?") == ([], None)  # nothing read
