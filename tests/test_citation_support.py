"""Citations name only passages that state the answer, best first, and say so when none read does."""

from ragfunnel.documents import NOT_STATED, LocatedContext, cite, cited
from ragfunnel.documents.citations import echoes, states
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


PEQUOD = ("The ship Pequod sailed from Nantucket on Christmas Day. Ahab was captain of the Pequod. "
          "Ahab ate his supper alone. The Pequod was built in 1780. Ishmael signed on to the Pequod as a sailor. "
          "The crew of the ship Pequod hunted the white whale for months. "
          "The Pequod sank in the Pacific with all hands but one. The Rachel picked up Ishmael after the sinking. "
          "The Rachel was built in 1802. Ishmael floated on a coffin until the Rachel found him.")
SANK = "Which ship picked up Ishmael after the Pequod sank?"


def _cite(answer, text, question, chunk_size=12):
    return cite(_prediction(answer, chunk_words(text, chunk_words=chunk_size)), LocatedContext.of_text(text), question)


def test_an_answer_that_repeats_the_question_is_not_cited():
    context = LocatedContext.of_text(PEQUOD)
    chunks = chunk_words(PEQUOD, chunk_words=12)
    # the sentences that name the Pequod and a word of the question: each would state it, were it not an echo
    naming = [s for s in PEQUOD.split(". ") if states(set(s.lower().split()), {"pequod"},
                                                       {"ship", "picked", "ishmael", "sank"})]
    assert len(naming) == 4
    assert echoes("The Pequod", SANK) and echoes("the pequod.", SANK)
    assert cited(_prediction("The Pequod", chunks), context, SANK) == ([], NOT_STATED)
    # the right answer is cited, by the sentence that states it rather than every one naming the Rachel
    assert not echoes("The Rachel", SANK)
    assert [c.quote for c in _cite("The Rachel", PEQUOD, SANK, chunk_size=100)] == [
        "The Rachel picked up Ishmael after the sinking."]


def test_an_echo_is_a_phrase_of_the_question_not_any_of_its_words():
    # the question's words recombined name something it did not: a treaty, not the confederation
    question = ("The basis of the European Trade Union Confederation's jurisdiction began with the signing of "
                "what treaty?")
    assert not echoes("Treaty on European Union", question)
    assert echoes("European Trade Union", question)
    assert not echoes("The Pequod sank twice", SANK)  # it adds a word
    assert not echoes("", SANK) and not echoes("the", SANK)  # no words: nothing repeated


def test_the_option_a_choice_question_offers_is_cited_by_a_sentence_stating_it():
    question = "Which ship is older, the Pequod or the Rachel?"
    assert not echoes("The Pequod", question)
    text = "The Pequod was built in 1780. The Rachel was built in 1802."
    # no sentence holds a word the question asks beyond its options ("ship", "older"): the option is cited alone
    assert [c.quote for c in _cite("The Pequod", text, question, chunk_size=100)] == ["The Pequod was built in 1780."]
    assert _cite("The Pequod", text, "Which ship is older than the Rachel?", chunk_size=100) == []


def test_a_sentence_must_speak_of_what_was_asked():
    quotes = [c.quote for c in _cite("Ahab", PEQUOD, "Who was captain of the Pequod?", chunk_size=100)]
    assert quotes == ["Ahab was captain of the Pequod."]  # not "Ahab ate his supper alone."
    assert not states({"ahab", "ate", "supper"}, {"ahab"}, {"captain", "pequod"})
    assert states({"ahab", "captain"}, {"ahab"}, {"captain", "pequod"})


def test_a_question_with_no_words_beyond_the_answer_still_cites_a_right_answer():
    assert [c.quote for c in _cite("Ada Brun", TEXT, "Who?", chunk_size=100)][:1] == [
        "The lighthouse at Gull Rock was kept by Ada Brun from 1901."]
    # the question's words are all the answer's: the answer adds "kept" and "light" to it
    assert [c.quote for c in _cite("Ada Brun kept the light", TEXT, "Ada Brun?", chunk_size=100)] == [
        "Ada Brun left the light in 1923, and her son Paul Brun kept it until 1950."]


def test_an_answer_half_made_of_the_question_is_stated_by_what_it_adds():
    question = "Drew Fuller starred in a series that originally broadcast on what station?"
    answer = "Drew Fuller starred in a series that originally broadcast on the Drew Pearson Sho…"
    text = ("Drew Fuller starred in a series that originally broadcast on a station in Los Angeles. "
            "The series ran for eight seasons.")
    assert not echoes(answer, question)  # it adds "Pearson" and "Sho"
    assert _cite(answer, text, question, chunk_size=100) == []  # six of its eight words, all the question's
    answer_words = {"drew", "fuller", "starred", "series", "originally", "broadcast", "pearson", "sho"}
    repeated = answer_words - {"pearson", "sho"}
    assert not states(repeated | {"station"}, answer_words, {"station"}, repeated=repeated)
    assert states(repeated | {"pearson", "station"}, answer_words, {"station"}, repeated=repeated)


def test_a_yes_no_answer_is_still_cited():
    quotes = [c.quote for c in _cite("Yes", PEQUOD, "Did the Rachel pick up Ishmael?", chunk_size=100)]
    assert quotes and quotes[0] == "The Rachel picked up Ishmael after the sinking."
    # "yes" is a phrase of this question, but a yes/no answer is stated by the question's words, never an echo
    question = "Did the Rachel say yes to Ishmael?"
    assert echoes("Yes", question)
    assert [c.quote for c in _cite("Yes", "The Rachel said yes to Ishmael.", question, 100)] == [
        "The Rachel said yes to Ishmael."]


def test_a_chunk_is_cited_by_any_sentence_that_states_the_answer():
    # the first sentence shares more words, but only the second names Ada Brun whole
    text = "The Gull Rock light was kept by Ada's family. Ada Brun kept it."
    [citation] = _cite("Ada Brun", text, "Who kept the Gull Rock light?", chunk_size=100)
    assert citation.quote == "Ada Brun kept it."


def test_a_chinese_echo_is_not_cited_and_a_chinese_answer_is():
    text = "裴廓德号沉没了。拉结号救起了以实玛利。裴廓德号建于1780年。裴廓德号的船长是亚哈。"
    question = "以实玛利在裴廓德号沉没后被哪艘船救起？"  # a Chinese character is a word: the phrase is 裴廓德号
    assert echoes("裴廓德号", question) and not echoes("拉结号", question)
    assert _cite("裴廓德号", text, question, chunk_size=1000) == []
    assert [c.quote for c in _cite("拉结号", text, question, chunk_size=1000)] == ["拉结号救起了以实玛利。"]
    # a choice between two ships: the one chosen is cited
    choice = "裴廓德号和拉结号哪艘船更老？"
    assert not echoes("裴廓德号", choice)
    built = "裴廓德号建于1780年。拉结号建于1802年。"  # neither sentence holds a character the question asks beyond them
    assert [c.quote for c in _cite("裴廓德号", built, choice, chunk_size=1000)] == ["裴廓德号建于1780年。"]


def test_an_answer_in_a_sentence_is_cited_though_it_holds_the_question_in_other_forms():
    # the question's words beyond the answer's are "leave" alone, which the quote holds as "leaves"
    text = "The ferry to Gull Rock leaves at nine. Tickets are sold on the quay."
    assert [c.quote for c in _cite("The ferry leaves at nine.", text, "When does the ferry leave?", 100)] == [
        "The ferry to Gull Rock leaves at nine."]
    assert states({"ferry", "leaves", "nine"}, {"nine"}, {"ferry", "leave"})  # a form of a question word
    assert not states({"tickets", "nine"}, {"nine"}, {"ferry", "leave"})


def test_the_question_word_may_stand_in_the_sentence_before_the_quote():
    text = "Gull Rock Light stands off Tarrow Point. Its last keeper, Ada Penhallow, tended the lamp until 1958."
    chunks = chunk_words(text, chunk_words=100)
    quotes = [c.quote for c in cite(_prediction("Ada Penhallow", chunks), LocatedContext.of_text(text),
                                    "Who kept the Gull Rock light?")]
    assert quotes == ["Its last keeper, Ada Penhallow, tended the lamp until 1958."]
    assert states({"ada", "penhallow", "keeper"}, {"ada", "penhallow"}, {"gull", "rock"}, before={"gull", "light"})
    assert not states({"ada", "penhallow", "keeper"}, {"ada", "penhallow"}, {"gull", "rock"}, before={"tarrow"})
