"""IterDRAG and grammar-constrained steps with real bundled models (marker: model).

The end-to-end test answers a real HotpotQA bridge question over an index built from a slice of
the shared HotpotQA corpus: the question's own ten paragraphs (its two supporting paragraphs
among them) and another question's ten as distractors. No demonstrations: the prompt stays
near 400 tokens, which keeps the test within a couple of minutes on two cores.
"""

import time

import pytest

from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.errors import ConfigError
from ragfunnel.llm import resolve
from ragfunnel.methods.config import IterDragConfig
from ragfunnel.methods.iterdrag import IterDRAG
from ragfunnel.prompts.self_ask import FINAL, FOLLOW_UP, INTERMEDIATE, INTERMEDIATE_GRAMMAR, STEP_GRAMMAR
from ragfunnel.types import SamplingParams
from tests.conftest import HOTPOT

pytestmark = pytest.mark.model

CORPUS = HOTPOT.parent / "hotpotqa_train_corpus.json"
QUESTION = 13  # "At the 2011 census, what was he population of the city where Kerry Saxby-Junna was born?"
DISTRACTORS = 27  # "From 1945-1949 Dick Humbert played for an NFL team based in what state?"


@pytest.fixture(scope="module")
def hotpot_index(hotpot_examples, tmp_path_factory):
    if not CORPUS.exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    example = hotpot_examples[QUESTION]
    titles = {title for e in (example, hotpot_examples[DISTRACTORS]) for title, _ in e["context"]}
    docs = [d for d in load_corpus(CORPUS) if d.title in titles]
    assert {title for title, _ in example["supporting_facts"]} <= {d.title for d in docs}
    root = tmp_path_factory.mktemp("hotpot") / "ix"
    build_index(docs, root, source=str(CORPUS))
    return CorpusIndex(root), example


def test_iterdrag_end_to_end_follows_up_and_grows_its_context(hotpot_index):
    index, example = hotpot_index
    config = IterDragConfig(documents=2, iterations=2, max_tokens=32)
    method = IterDRAG(config, index=index, strong="bundled:qwen2.5-1.5b")
    started = time.perf_counter()
    p = method.run(example["question"])
    seconds = time.perf_counter() - started
    calls = p.trace.stages[1:]
    print(f"\nIterDRAG on {example['question']!r} took {seconds:.1f}s; answer {p.answer!r} "
          f"(reference {example['answer']!r})")
    for s in calls:
        print(f"  {s.name}: {s.input_tokens} tokens in, {s.detail['context_documents']} documents, "
              f"{s.detail['reply']!r}")

    follow_ups = [s for s in calls if s.detail["kind"] == "follow_up" and s.detail.get("query")]
    assert follow_ups, "the model asked no follow-up"
    # the grammar held every step to the chain's format
    assert all(s.detail["prefixed"] for s in calls if s.name != "final")
    # every call reads more than the one before: the chain so far, and documents for follow-ups
    sizes = [s.input_tokens for s in calls]
    assert all(b > a for a, b in zip(sizes[:-1], sizes[1:], strict=True)), sizes
    after = calls[calls.index(follow_ups[0]) + 1]
    assert after.detail["kind"] in ("intermediate", "final")
    assert after.detail["context_documents"] == follow_ups[0].detail["context_documents"] + \
        follow_ups[0].detail["documents_added"]
    assert p.trace.input_tokens == sum(sizes) and calls[-1].detail["largest_prompt_tokens"] == max(sizes)
    assert p.answer and len(p.chunks_used) == calls[-1].detail["context_documents"]


def test_the_grammar_constrains_a_real_model():
    # Under a grammar the tiny model spells a prefix out in small tokens: leave room for the text after it.
    llm = resolve("bundled:smollm2-135m")
    prompt = "Tell me a short story about a lighthouse keeper."
    (free,), (step,), (answer,) = (llm.generate([prompt], SamplingParams(max_tokens=40, grammar=g))
                                   for g in (None, STEP_GRAMMAR, INTERMEDIATE_GRAMMAR))
    assert not free[0].text.startswith((FOLLOW_UP, FINAL, INTERMEDIATE))
    for completion, prefixes in ((step, (FOLLOW_UP, FINAL)), (answer, (INTERMEDIATE,))):
        text = completion[0].text
        assert text.startswith(tuple(f"{p} " for p in prefixes)), text
        assert len(text.strip().splitlines()) == 1 and len(text.strip()) > len(max(prefixes, key=len)) + 1


def test_a_broken_grammar_is_a_config_error_not_a_crash():
    llm = resolve("bundled:smollm2-135m")
    with pytest.raises(ConfigError, match="cannot parse the grammar"):
        llm.generate(["hi"], SamplingParams(grammar='root ::= ("unclosed"'))
