import pytest

from ragfunnel.documents import read_document
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.text import check_context, chunk_words

TEXT = "Alpha beta  gamma.\nDelta epsilon\tzeta eta\n\ntheta iota kappa lambda"


def test_round_trip_keeps_every_word_in_order():
    chunks = chunk_words(TEXT, chunk_words=3)
    assert " ".join(" ".join(c.text.split()) for c in chunks) == " ".join(TEXT.split())
    assert [c.position for c in chunks] == [0, 1, 2, 3]
    assert [c.n_words for c in chunks] == [3, 3, 3, 2]


def test_chunk_text_is_the_exact_slice_of_the_original():
    chunks = chunk_words(TEXT, chunk_words=4)
    assert chunks[0].text == "Alpha beta  gamma.\nDelta"
    assert all(c.text in TEXT for c in chunks)
    assert chunks[1].id == "context#1" and chunks[1].doc_id == "context"


def test_one_chunk_when_window_exceeds_text():
    (only,) = chunk_words(TEXT, chunk_words=300)
    assert only.text == TEXT.strip()


def test_bad_window_is_a_config_error():
    with pytest.raises(ConfigError, match="chunk_words"):
        chunk_words(TEXT, chunk_words=0)


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_context_is_refused(text):
    with pytest.raises(InputError, match="empty"):
        check_context(text)


def test_binary_context_is_refused():
    with pytest.raises(InputError, match="binary"):
        check_context("PK\x03\x04\x00\x00abc")


def test_non_utf8_file_is_refused(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        read_document(path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_document(tmp_path / "nope.txt")
