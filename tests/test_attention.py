"""Generator-attention post-ranking (FunnelRAG stage 3)."""

import json

import numpy as np
import pytest

from tests.conftest import HOTPOT


def test_captured_row_equals_eager_attention_on_a_tiny_random_model():
    torch = pytest.importorskip("torch", reason="needs the [attention] extra")  # here: collecting stays quick
    transformers = pytest.importorskip("transformers", reason="needs the [attention] extra")
    from ragfunnel.retrieve.attention import ATTENTION_NAME, _capture, _register_attention

    _register_attention()
    config = transformers.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (1, 12))
    eager = transformers.Qwen2ForCausalLM(config).eval()
    eager.config._attn_implementation = "eager"
    with torch.inference_mode():
        full = eager(input_ids=ids, output_attentions=True).attentions  # layers of (1, heads, 12, 12)
    eager.config._attn_implementation = ATTENTION_NAME
    _capture.rows = []
    try:
        with torch.inference_mode():
            eager(input_ids=ids)
        rows = _capture.rows
    finally:
        _capture.rows = None
    assert len(rows) == 2
    for layer, row in zip(full, rows, strict=True):
        np.testing.assert_allclose(row.numpy(), layer[0, :, -1, :].numpy(), atol=1e-5)


@pytest.mark.model
def test_attention_ranks_the_answer_passage_first_on_real_hotpotqa_questions():
    """Three real questions, the answer's paragraph among four others at the start, middle and end."""
    if not HOTPOT.exists():
        pytest.skip("shared data absent")
    pytest.importorskip("torch", reason="needs the [attention] extra")
    from ragfunnel.llm import bundled
    from ragfunnel.retrieve.attention import AttentionPostRanker

    ranker = AttentionPostRanker.from_gguf(bundled.ensure("qwen2.5-0.5b"))
    questions = [q for q in json.loads(HOTPOT.read_text()) if q["answer"] not in ("yes", "no")][:3]
    ranks = []
    for q in questions:
        paras = {title: "".join(sents) for title, sents in q["context"]}
        gold = next(t for t in paras if q["answer"].lower() in paras[t].lower())
        others = [paras[t] for t in paras if q["answer"].lower() not in paras[t].lower()][:4]
        for at in (0, 2, 4):
            scores = ranker.score(q["question"], others[:at] + [paras[gold]] + others[at:])
            ranks.append(1 + int((scores > scores[at]).sum()))
    # Chance would put the answer's passage first 1 time in 5 and at mean rank 3.
    assert sum(r == 1 for r in ranks) >= 5 and np.mean(ranks) < 2, ranks
