"""lib.metadata: the paper's benchmark/model tables, store overrides, the ObsScaling compute join."""

from __future__ import annotations

import pytest

from lib import metadata, store


def test_benchmark_table_matches_the_paper():
    names = sorted(metadata.BENCHMARKS)
    frame = metadata.benchmarks_frame(names)
    assert len(frame) == 27
    counts = frame["category"].value_counts().to_dict()
    assert counts == {"Language Understanding": 9, "Question Answering": 5, "Commonsense Reasoning": 4,
                      "Perplexity": 3, "Physics/Biology/Chemistry": 2, "Math": 2, "Medicine": 2}
    nq = metadata.benchmark_info("nq_open")
    assert (nq.metric, nq.filter, nq.kind, nq.higher_is_better) == ("exact_match", "remove_whitespace",
                                                                    "generate_until", True)
    assert metadata.benchmark_info("gsm8k").filter == "flexible-extract"
    assert metadata.benchmark_info("cola").metric == "mcc"
    assert metadata.benchmark_info("hellaswag").metric == "acc_norm"
    wiki = metadata.benchmark_info("wiki_2025")
    assert wiki.is_perplexity and not wiki.higher_is_better and wiki.metric == "bits_per_byte"
    assert metadata.perplexity_benchmarks(["mnli", "arxiv_2025", "sciq"]) == ["arxiv_2025"]


def test_model_table_matches_the_paper():
    frame = metadata.models_frame(list(metadata._MODELS))
    assert len(frame) == 61
    assert int((~frame["instruct"]).sum()) == 37 and int(frame["instruct"].sum()) == 24
    assert frame["family"].value_counts().to_dict() == {"Qwen": 26, "Pythia": 8, "Llama": 8, "Gemma": 8,
                                                         "Yi": 7, "GPT-2": 4}
    chat = metadata.model_info("Qwen/Qwen1.5-7B-Chat")
    assert chat.instruct and chat.family == "Qwen" and chat.extra["series"] == "Qwen1.5"
    assert chat.extra["base_model"] == "Qwen/Qwen1.5-7B"
    assert frame["params_b"].max() == pytest.approx(14.7)


def test_unknown_names_fail_with_close_matches():
    with pytest.raises(metadata.MetadataError,
                       match=r"'Qwen/Qwen2-7B-instruct'.*did you mean 'Qwen/Qwen2-7B-Instruct'"):
        metadata.model_info("Qwen/Qwen2-7B-instruct")
    with pytest.raises(metadata.MetadataError, match=r"benchmark 'hellaswg'.*'hellaswag'"):
        metadata.benchmarks_frame(["mnli", "hellaswg"])


def test_store_records_extend_and_override(tmp_path):
    store.write_meta(tmp_path, "models", {
        "tiny/a": {"family": "tiny", "params_b": 0.002, "instruct": False, "prepared": {"qa": 0.5}},
        "openai-community/gpt2": {"family": "GPT-2 (override)"}})
    store.write_meta(tmp_path, "benchmarks", {"local_qa": {"category": "Question Answering", "metric": "acc"},
                                              "local_corpus": {"category": "Perplexity", "metric": "bits_per_byte"}})
    tiny = metadata.model_info("tiny/a", store=tmp_path)
    assert (tiny.family, tiny.params_b, tiny.instruct, tiny.flops_1e21) == ("tiny", 0.002, False, None)
    assert tiny.extra == {"prepared": {"qa": 0.5}}
    gpt2 = metadata.model_info("openai-community/gpt2", store=tmp_path)
    assert gpt2.family == "GPT-2 (override)" and gpt2.params_b == pytest.approx(0.124)   # field-wise merge
    qa = metadata.benchmark_info("local_qa", store=tmp_path)
    assert qa.higher_is_better and qa.kind == "multiple_choice"
    corpus = metadata.benchmark_info("local_corpus", store=tmp_path)
    assert corpus.is_perplexity and not corpus.higher_is_better and corpus.kind == "loglikelihood_rolling"
    with pytest.raises(metadata.MetadataError, match="tiny/b"):
        metadata.models_frame(["tiny/a", "tiny/b"], store=tmp_path)


def test_compute_join_with_obsscaling(harmony_data):
    frame = metadata.models_frame(list(metadata._MODELS))
    # exact id
    assert frame.loc["google/gemma-2b", "flops_1e21"] == pytest.approx(72.0)
    assert frame.loc["google/gemma-2b", "pretrain_tokens_t"] == pytest.approx(6.0)
    # normalised id: ObsScaling spells it meta-llama/Meta-Llama-3.1-8B
    assert frame.loc["meta-llama/Llama-3.1-8B", "flops_1e21"] == pytest.approx(720.0)
    # documented alias (same size and token count)
    assert frame.loc["EleutherAI/pythia-12b", "flops_1e21"] == pytest.approx(21.6)
    # instruct variants inherit their base model's pre-training compute, and say so
    inst = metadata.model_info("meta-llama/Llama-3.1-8B-Instruct")
    assert inst.flops_1e21 == pytest.approx(720.0)
    assert inst.extra["compute_source"] == "obsscaling:meta-llama/Meta-Llama-3.1-8B (base model)"
    # in the table but without compute (GPT-2, Qwen2), and absent (Qwen2.5): None
    assert frame.loc[["openai-community/gpt2", "Qwen/Qwen2-7B", "Qwen/Qwen2.5-7B"], "flops_1e21"].isna().all()
    has = frame["flops_1e21"].notna()
    assert int(has.sum()) == 36 and int((has & ~frame["instruct"]).sum()) == 22


def test_metadata_without_published_data(monkeypatch, tmp_path):
    monkeypatch.setenv("HARMONY_DATA", str(tmp_path))          # an empty folder: no ObsScaling table
    info = metadata.model_info("google/gemma-2b")
    assert info.family == "Gemma" and info.flops_1e21 is None
