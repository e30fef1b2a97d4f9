"""``ragfunnel funnel ...``: FunnelRAG tooling beyond search — local-to-global distillation."""

from __future__ import annotations

from pathlib import Path

import click

from ragfunnel import journal
from ragfunnel.cli.common import config_option, remote_embedder_option
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.methods.config import FunnelConfig


@click.group()
def funnel() -> None:
    """FunnelRAG tools: distil the post-ranker's judgement into a cross-encoder pre-ranker."""


@funnel.command()
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--questions", "dataset", required=True, type=click.Path(path_type=Path),
              help="Training questions with answers (any `ragfunnel eval` dataset format).")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Model directory to write (labels are kept there too; re-running resumes the labelling).")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True,
              help="Label the first N questions.")
@click.option("--alpha", type=click.FloatRange(0, 1), default=0.75, show_default=True,
              help="Document score = alpha * best passage + (1 - alpha) * mean passage.")
@click.option("--top-positives", type=click.IntRange(min=1), default=2, show_default=True,
              help="Documents with the K best aggregated scores are positives (with every answer-bearing one).")
@click.option("--easy-negatives", type=click.IntRange(0, 10_000),
              help="Also label this many other documents of the retrieved clusters (negatives unless they hold "
                   "an answer), so the new scorer sees unrelated documents too [default: 8; 0 with --plain].")
@config_option(FunnelConfig, "top_clusters")
@config_option(FunnelConfig, "top_documents")
@config_option(FunnelConfig, "post_ranker")
@click.option("--init", "init", metavar="PATH",
              help="Model to fine-tune: a cross-encoder directory or name [default: the bundled MiniLM weights "
                   "with a new scoring head].")
@click.option("--epochs", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--lr", "learning_rate", type=click.FloatRange(min=0, min_open=True), default=3e-5, show_default=True,
              help="AdamW learning rate of the pre-trained weights.")
@click.option("--head-lr", "head_learning_rate", type=click.FloatRange(min=0, min_open=True), default=1e-3,
              show_default=True,
              help="Learning rate of weights new to the checkpoint (the scoring head on MiniLM).")
@click.option("--prior-weight", type=click.FloatRange(min=0),
              help="Train the cross-encoder as a correction to this weight x the bundled bi-encoder's cosine "
                   "(0: the cross-encoder alone, e.g. for an --init that is already a trained cross-encoder) "
                   "[default: 10; 0 with --plain].")
@click.option("--plain", is_flag=True,
              help="Train as the FunnelRAG paper does (its Eq. 5 and 6): BPR on the documents the pre-ranker kept, "
                   "with no easy negatives, and on the cross-encoder's own score, with no bi-encoder prior in "
                   "training or when the model is used (the model records it).")
@click.option("--seed", type=int, default=0, show_default=True)
@remote_embedder_option
def distill(index_dir: Path, dataset: Path, out_dir: Path, limit: int, alpha: float, top_positives: int,
            easy_negatives: int | None, top_clusters: int | None, top_documents: int, post_ranker: str,
            init: str | None, epochs: int, learning_rate: float, head_learning_rate: float,
            prior_weight: float | None, plain: bool, seed: int, remote_embedder: str | None) -> None:
    """Label the pre-ranker's documents with aggregated attention scores and train a cross-encoder (BPR).

    Load the result with `ragfunnel search DIR QUESTION --pre-ranker OUT`.
    """
    from ragfunnel.corpus.distill import LABELS_FILE, collect_labels, train_pre_ranker
    from ragfunnel.corpus.funnel import FunnelRetriever
    from ragfunnel.corpus.index import CorpusIndex
    from ragfunnel.eval.datasets import load_dataset
    from ragfunnel.retrieve.attention import load_post_ranker
    from ragfunnel.retrieve.embed import minilm_directory
    from ragfunnel.retrieve.rerank import BiEncoderPreRanker

    additions = [f"--{name} {value:g}" for name, value in (("easy-negatives", easy_negatives),
                                                           ("prior-weight", prior_weight)) if value]
    if plain and additions:
        raise ConfigError(f"--plain trains without easy negatives and without the bi-encoder prior; drop "
                          f"{' and '.join(additions)}, or --plain")
    journal.out_dir(out_dir)
    with journal.exclusive(out_dir / journal.LOCK_FILE, out_dir):  # labelling and training alike
        examples = [e for e in load_dataset(dataset, limit=limit).examples if e.answers]
        if not examples:
            raise InputError(f"{dataset} has no questions with answers to learn from; pass a training set with answers")
        index = CorpusIndex(index_dir, remote_embedder=remote_embedder)
        retriever = FunnelRetriever(index, pre_ranker=BiEncoderPreRanker(embedder=index.embedder,
                                                                         stored=index.document_vectors),
                                    post_ranker=load_post_ranker(post_ranker), top_clusters=top_clusters,
                                    top_documents=top_documents)
        labelled = collect_labels(retriever, examples, out_dir / LABELS_FILE, alpha=alpha, top_k=top_positives,
                                  easy_negatives=easy_negatives, plain=plain)
        log = train_pre_ranker(labelled, init=init or minilm_directory(), out=out_dir, epochs=epochs,
                               learning_rate=learning_rate, head_learning_rate=head_learning_rate, seed=seed,
                               prior_weight=prior_weight, plain=plain)
    hits = sum(any(x.hits) for x in labelled)
    if plain:
        how = "plain (the paper's Eq. 5-6: no easy negatives, no bi-encoder prior)"
    elif log.prior_weight:
        how = f"as a correction to {log.prior_weight:g} x the bi-encoder's cosine"
    else:
        how = "as a cross-encoder alone"
    click.echo(f"{out_dir}: trained on {log.questions} of {len(labelled)} labelled questions ({hits} with an "
               f"answer-bearing document), {log.pairs} pairs, loss per epoch {log.epoch_loss}, {log.seconds:.0f}s, "
               f"{how}")
