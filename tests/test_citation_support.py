"""Citations name only passages that state the answer, best first, and say so when none read does."""

from ragfunnel.documents import NOT_STATED, LocatedContext, cite, cited
from ragfunnel.documents.citations import Asked, states
from ragfunnel.text import chunk_words
from ragfunnel.types import Prediction, ScoredChunk, Trace

TEXT = ("The lighthouse at Gull Rock was kept by Ada Brun from 1901. Storms closed the harbour twice.\n\n"
        "Fishing boats sailed each morning. Nets were mended on the quay in the evening.\n\n"
        "Ada Brun left the light in 1923, and her son Paul Brun kept it until 1950.")


def _prediction(answer, chunks):
    return Prediction(answer=answer, method="op", chunks_used=[ScoredChunk(c, 1.0) for c in chunks], trace=Trace())


def test_a_sentence_states_an_answer_by_its_words():
    assert states("Ada Brun kept it.", "Ada Brun", "Who kept the light?")
    assert not states("Ada kept it.", "Ada Brun", "Who kept the light?")  # a two-word answer needs both words
    assert not states("Kim Jong-chul kept it.", "Kim Jong-suk", "Who kept it?")  # and a three-word one all three
    # three in five of a longer answer's words: 3 of 5 states it, 2 of 5 does not
    assert states("alpha bravo charlie", "alpha bravo charlie delta echo", "What?")
    assert not states("alpha bravo", "alpha bravo charlie delta echo", "What?")
    # a yes/no answer is stated by a third of the question's words, two at least
    question = "Did storms close the Gull Rock lighthouse, keeper and all?"
    assert states("The Gull Rock lighthouse stands.", "Yes", question)
    assert not states("Gull Island stands.", "Yes", question)


def test_an_answer_of_up_to_three_words_is_stated_as_a_phrase():
    question = "Which Queensland Senator did Scott Buchholz serve as chief of staff?"
    assert states("He served as chief of staff to Senator Barnaby Joyce.", "Barnaby Joyce", question)
    # the same words apart may name someone else, or say it in other words
    assert not states("Senator Barnaby Thomas Gerard Joyce served as chief.", "Barnaby Joyce", question)
    assert not states("Senator Brad Pitt and Angelina Jolie leased it.", "Angelina Jolie Pitt", "Which senator?")
    # a date is written in either order
    assert states("The club was renamed on August 1, 2019.", "1 August 2019", "When was the club renamed?")


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


def _cite(answer, text, question, chunk_size=100):
    return cite(_prediction(answer, chunk_words(text, chunk_words=chunk_size)), LocatedContext.of_text(text), question)


def test_an_answer_that_repeats_the_question_is_not_cited():
    context = LocatedContext.of_text(PEQUOD)
    chunks = chunk_words(PEQUOD, chunk_words=12)
    # four sentences name the Pequod and a word of the question: each would state it, were it not an echo
    assert sum(states(s, "Pequod", "Which ship picked up Ishmael, or sank?") for s in PEQUOD.split(". ")) == 4
    assert Asked.of("The Pequod", SANK).echo and Asked.of("the pequod.", SANK).echo
    assert cited(_prediction("The Pequod", chunks), context, SANK) == ([], NOT_STATED)
    assert not states("The Pequod sank.", "The Pequod", SANK)
    # the right answer is cited, by the sentence that states it rather than every one naming the Rachel
    assert not Asked.of("The Rachel", SANK).echo
    assert [c.quote for c in _cite("The Rachel", PEQUOD, SANK)] == ["The Rachel picked up Ishmael after the sinking."]


def test_an_echo_is_a_phrase_of_the_question_not_any_of_its_words():
    # the question's words recombined name something it did not: a treaty, not the confederation
    question = ("The basis of the European Trade Union Confederation's jurisdiction began with the signing of "
                "what treaty?")
    assert not Asked.of("Treaty on European Union", question).echo
    assert Asked.of("European Trade Union", question).echo
    assert not Asked.of("The Pequod sank twice", SANK).echo  # it adds a word
    assert not Asked.of("", SANK).echo and not Asked.of("the", SANK).echo  # no words: nothing repeated


def test_the_option_a_choice_question_offers_is_cited_by_a_sentence_stating_it():
    text = "The Pequod was built in 1780. The Rachel was built in 1802."
    for question in ("Which ship is older, the Pequod or the Rachel?",
                     "Which was built first between the Pequod and the Rachel?"):
        assert not Asked.of("The Pequod", question).echo
        # no sentence holds a word the question asks beyond its options ("ship", "older"): the option is cited alone
        assert [c.quote for c in _cite("The Pequod", text, question)] == ["The Pequod was built in 1780."]
    # no options offered: an answer naming only what the question names is an echo
    assert _cite("The Pequod", text, "Which ship is older than the Pequod?") == []


def test_a_yes_no_answer_is_cited_by_the_question_words_never_taken_for_an_echo():
    question = "Did the Rachel pick up Ishmael?"
    for answer in ("Yes", "no."):
        quotes = [c.quote for c in _cite(answer, PEQUOD, question)]
        assert quotes[:1] == ["The Rachel picked up Ishmael after the sinking."]
    # "yes" is a phrase of this question, but a yes/no answer is stated by the question's words, never an echo
    question = "Did the Rachel say yes to Ishmael?"
    assert not Asked.of("Yes", question).echo
    assert [c.quote for c in _cite("Yes", "The Rachel said yes to Ishmael.", question)] == [
        "The Rachel said yes to Ishmael."]


def test_a_sentence_must_speak_of_what_was_asked():
    quotes = [c.quote for c in _cite("Ahab", PEQUOD, "Who was captain of the Pequod?")]
    assert quotes == ["Ahab was captain of the Pequod."]  # not "Ahab ate his supper alone."
    assert not states("Ahab ate his supper alone.", "Ahab", "Who was captain of the Pequod?")
    # a form of a question word will do ("keeper" for "keeps")
    assert states("The keeper is Ada Brun.", "Ada Brun", "Who keeps the light?")
    # a question with no word beyond the answer's asks for none
    assert [c.quote for c in _cite("Ada Brun", TEXT, "Who?")][:1] == [
        "The lighthouse at Gull Rock was kept by Ada Brun from 1901."]


def test_the_question_word_may_stand_in_the_sentences_before_the_quote_in_its_passage():
    # the README's example: "Its" is the light
    text = ("Gull Rock Light stands off Tarrow Point. "
            "Its last keeper, Ada Penhallow, tended the lamp from 1931 until 1958.")
    [citation] = _cite("Ada Penhallow", text, "Who kept the Gull Rock light?")
    assert citation.quote == "Its last keeper, Ada Penhallow, tended the lamp from 1931 until 1958."
    assert states("Its last keeper, Ada Penhallow, tended the lamp.", "Ada Penhallow", "Who kept the Gull Rock light?",
                  before="Gull Rock Light stands off Tarrow Point.")
    # not from another passage, nor from further back than two sentences
    other = "Gull Rock Light stands off Tarrow Point.\n\nIts last keeper, Ada Penhallow, tended the lamp."
    assert _cite("Ada Penhallow", other, "Who kept the Gull Rock light?") == []
    far = "Gull Rock Light stands off Tarrow Point. Boats pass. Terns nest. Its last keeper, Ada Penhallow, stayed."
    assert _cite("Ada Penhallow", far, "Who kept the Gull Rock light?") == []


def test_an_answer_whose_sentence_a_chunk_edge_cuts_is_cited_by_the_chunk_that_holds_it():
    text = "A storm sank the old pier in 1998.\n\nThe lighthouse keeper is called Ada Brun."
    context = LocatedContext.of_text(text)
    chunks = chunk_words(text, chunk_words=13)
    assert chunks[-1].text == "Ada Brun."  # the question's word, "lighthouse", is in the chunk before
    citations, note = cited(_prediction("Ada Brun", chunks[-1:]), context, "Who keeps the lighthouse?")
    assert [c.quote for c in citations] == ["Ada Brun."] and note is None
    # an answer cut in two by the edge is cited by both chunks that hold a part of it
    cut = chunk_words(text, chunk_words=14)
    assert cut[-1].text == "Brun."
    quotes = [c.quote for c in cite(_prediction("Ada Brun", cut), context, "Who keeps the lighthouse?")]
    assert sorted(quotes) == ["Brun.", "The lighthouse keeper is called Ada"]
    # but not by a chunk holding only the same word of someone else ("her son Paul | Brun")
    quotes = [c.quote for c in cite(_prediction("Ada Brun", chunk_words(TEXT, chunk_words=14)),
                                    LocatedContext.of_text(TEXT), "Who kept the Gull Rock light?")]
    assert "Ada Brun left the light in 1923, and her son Paul" in quotes and "Brun kept it until 1950." not in quotes


def test_an_answer_restating_the_question_is_held_by_what_it_adds():
    # the question's words beyond the answer's are "leave" alone, which the quote holds as "leaves"
    text = "The ferry to Gull Rock leaves at nine. Tickets are sold on the quay."
    assert [c.quote for c in _cite("The ferry leaves at nine.", text, "When does the ferry leave?")] == [
        "The ferry to Gull Rock leaves at nine."]
    question = "Drew Fuller starred in a series that originally broadcast on what station?"
    answer = "Drew Fuller starred in a series that originally broadcast on the Drew Pearson Sho…"
    text = ("Drew Fuller starred in a series that originally broadcast on a station in Los Angeles. "
            "The series ran for eight seasons.")
    assert not Asked.of(answer, question).echo  # it adds "Pearson" and "Sho"
    assert _cite(answer, text, question) == []  # which no sentence holds


def test_a_chunk_is_cited_by_any_sentence_that_states_the_answer():
    # the first sentence shares more words, but only the second names Ada Brun whole
    [citation] = _cite("Ada Brun", "The Gull Rock light was kept by Ada's family. Ada Brun kept it.",
                       "Who kept the Gull Rock light?")
    assert citation.quote == "Ada Brun kept it."


REPORT = "".join(f"第{i}部分：本市第{i}项工程于{2000 + i}年开工，投资{i * 3}亿元，带动就业{i * 120}人。"
                 for i in range(1, 12))


def test_chinese_answers_are_cited_and_a_chinese_echo_is_not():
    text = REPORT + "\n\n附件：全市森林覆盖率达到19.01%，比上年提高两个百分点。" + REPORT
    question = "全市森林覆盖率达到了多少？"  # "多少" asks: it is no word a passage holds
    assert [c.quote for c in _cite("19.01%", text, question, chunk_size=1000)] == [
        "附件：全市森林覆盖率达到19.01%，比上年提高两个百分点。"]
    # a small model's answer repeats the question around the number: still cited, also across a chunk's edge
    for answer in ("全市森林覆盖率达到19.01%", "全市森林覆盖率达到了19.01%。"):
        assert _cite(answer, text, question, chunk_size=1000) and _cite(answer, text, question, chunk_size=100)
    # an answer only repeating the question is not
    for echo in ("全市森林覆盖率", "全市森林覆盖率达到了多少"):
        assert Asked.of(echo, question).echo
        assert cited(_prediction(echo, chunk_words(text, chunk_words=100)), LocatedContext.of_text(text),
                     question) == ([], NOT_STATED)


def test_a_chinese_echo_of_a_ship_and_a_chinese_choice():
    text = "裴廓德号沉没了。拉结号救起了以实玛利。裴廓德号建于1780年。裴廓德号的船长是亚哈。"
    question = "以实玛利在裴廓德号沉没后被哪艘船救起？"  # a Chinese character is a word: the phrase is 裴廓德号
    assert Asked.of("裴廓德号", question).echo and not Asked.of("拉结号", question).echo
    assert _cite("裴廓德号", text, question) == []
    assert [c.quote for c in _cite("拉结号", text, question)] == ["拉结号救起了以实玛利。"]
    choice = "裴廓德号和拉结号哪艘船更老？"
    assert not Asked.of("裴廓德号", choice).echo
    built = "裴廓德号建于1780年。拉结号建于1802年。"  # neither sentence holds a character the question asks beyond them
    assert [c.quote for c in _cite("裴廓德号", built, choice)] == ["裴廓德号建于1780年。"]
