"""Score a model (base or with a LoRA adapter) on one split of an lm-eval task, with lm-eval itself.

The model is loaded once and wrapped in lm-eval's ``HFLM`` as a preloaded object, so validation
after every epoch and every learning rate reuses it (no reload). lm-eval's logged samples give the
per-item correctness that BenchAlign reads (:func:`lib.layout.items_path`).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import layout, store
from ..errors import UserError
from ..util import did_you_mean, digest, sha256_bytes
from . import hub
from .tasks import TaskError, TaskInfo, docs, use_split

log = logging.getLogger(__name__)


class ModelError(UserError, ValueError):
    """A model cannot be found or loaded (the message names it)."""


# ---------------------------------------------------------------------------------------------
# models


def resolve_model(entry: str, store_root: str | Path | None = None, offline: bool | None = None) -> tuple[str, str]:
    """(name, source) of a model given as a store-meta name with a ``path``, a local folder or a
    hub id. Fails early, naming the model, when a local folder is missing or an offline hub id is
    not in the local cache."""
    meta = store.read_meta(store_root, "models") if store_root else {}
    if entry in meta and meta[entry].get("path"):
        path = Path(os.path.normpath(store.meta_path(store_root, meta[entry]["path"])))
        if not (path / "config.json").exists():
            raise ModelError(f"model {entry!r}: its folder {path} (from the store's _meta/models.json) "
                             "has no config.json; rebuild it (run the profile's prepare step)")
        return entry, str(path)
    path = Path(entry).expanduser()
    known = [k for k, v in meta.items() if v.get("path")]
    if path.is_absolute() or entry.startswith(".") or path.exists():
        if not (path / "config.json").exists():
            raise ModelError(f"unknown model path {entry!r}: no config.json there{did_you_mean(entry, known, n=3)}")
        return path.name, str(path.resolve())
    if hub.offline() if offline is None else offline:
        if not hub.cached(entry):
            raise ModelError(f"unknown model {entry!r}: not a local folder, a model of the store's "
                             f"metadata{did_you_mean(entry, known, n=3)}, nor a hub id in the local cache "
                             "(HF_HUB_OFFLINE is set)")
    else:
        profile = Path(store_root).parent.name if store_root else "<profile>"     # outputs/<profile>/store
        try:
            hub.require(f"model {entry!r}", f"make models PROFILE={profile}")
        except hub.HubUnreachable as exc:
            raise ModelError(str(exc)) from None
    return entry, entry


DTYPES = ("float32", "bfloat16", "float16")
# the files of a model folder that decide what it computes (weights, configuration, tokenizer)
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer*", "special_tokens_map.json", "added_tokens.json",
               "vocab*", "merges.txt", "chat_template*", "*.safetensors", "*.bin", "*.index.json", "*.model",
               "*.tiktoken")


def model_key(source: str) -> str:
    """What a model *is*, for the keys of cached results: for a local folder ``sha256:`` of the
    files that decide what it computes (:data:`MODEL_FILES`, by name and content), so a model
    rebuilt in the same place with other weights is a new model, and a moved folder is the same
    one; for a hub id ``hub:<id>@<revision>``, the revision the local cache holds (else the one
    the hub serves now; ``hub:<id>`` when neither can be asked)."""
    path = Path(source).expanduser()
    if (path / "config.json").is_file():
        files = sorted({f for pattern in MODEL_FILES for f in path.glob(pattern) if f.is_file()})
        return "sha256:" + sha256_bytes("".join(f"{f.name}\0{digest(f)}\n" for f in files))
    revision = _hub_revision(source)
    return f"hub:{source}@{revision}" if revision else f"hub:{source}"


@functools.cache
def _hub_revision(repo_id: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(repo_id, "config.json")
        if isinstance(hit, str):                       # .../snapshots/<commit>/config.json
            return Path(hit).parent.name
        if hub.offline():
            return None
        from huggingface_hub import HfApi

        return HfApi().model_info(repo_id, timeout=10).sha
    except Exception:  # noqa: BLE001 - an invalid id, no network, a gated repo: keyed by its id alone
        return None


def load_model(source: str, device: str | None = None, dtype: str = "float32"):
    """(model, tokenizer) from a local folder or hub id, in ``dtype`` (the paper: float32, the
    checkpoints' own precision is not used), on ``device`` (default: cuda when present). Gemma
    models use eager attention, as the paper's code did. The tokenizer gets a pad token (EOS)
    when it has none."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from .device import setup_torch

    if dtype not in DTYPES:
        raise ModelError(f"model {source!r}: dtype must be one of {list(DTYPES)}, got {dtype!r}"
                         f"{did_you_mean(str(dtype), DTYPES)}")
    device = device or setup_torch()
    try:
        config = AutoConfig.from_pretrained(source)
        extra = {"attn_implementation": "eager"} if config.model_type.startswith("gemma") else {}
        tok = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, dtype), **extra)
    except (OSError, ValueError) as exc:
        from huggingface_hub.errors import GatedRepoError

        if isinstance(exc, GatedRepoError):
            raise ModelError(f"model {source!r} is gated: request access on its hub page with the account whose "
                             "token this machine uses (HF_TOKEN, or `hf auth login`); `make models` checks them all"
                             ) from None
        raise ModelError(f"model {source!r} cannot be loaded: {str(exc).splitlines()[0]}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model.to(device)
    model.eval()
    return model, tok


AUTO_MAX_BATCH = 64       # "auto" on a GPU: lm-eval's search for the largest batch that fits stops here
AUTO_CPU_BATCH = 8        # "auto" on a CPU (lm-eval's search would probe the machine's memory)


def check_batch_size(batch_size: int | str) -> int | str:
    """An evaluation batch: a positive int or ``"auto"`` (raises ValueError naming the value)."""
    if batch_size == "auto" or (isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1):
        return batch_size
    raise ValueError(f"eval_batch_size must be a positive int or 'auto', got {batch_size!r}")


def rows_per_batch(batch_size: int | str) -> int:
    """Examples per forward pass where a number is needed (the validation loss): the batch, or
    :data:`AUTO_CPU_BATCH` for ``"auto"`` (the loss halves it on an out-of-memory error)."""
    return AUTO_CPU_BATCH if check_batch_size(batch_size) == "auto" else int(batch_size)


def make_lm(model, tokenizer, batch_size: int | str = 1, max_length: int | None = None, add_bos_token: bool = True):
    """lm-eval's ``HFLM`` around an already loaded model (base or PeftModel).

    ``add_bos_token`` True encodes every context with the tokenizer's special tokens (a BOS for
    Llama, Gemma and Yi; nothing for GPT-2, Pythia, Qwen), as the paper's evaluation did.
    ``batch_size``: documents per forward pass. The paper scored one at a time: its ``HFLM`` was
    built with the default batch of 1, and the ``batch_size="auto"`` it passed to
    ``simple_evaluate`` is ignored for a pre-built model. ``"auto"`` is faster and departs (padding
    moves the numbers slightly): on a GPU lm-eval finds the largest batch that fits (at most
    :data:`AUTO_MAX_BATCH`), on a CPU it is :data:`AUTO_CPU_BATCH`.
    """
    from lm_eval.models.huggingface import HFLM

    cache_templates()
    logging.getLogger("lm_eval.models.huggingface").setLevel(logging.ERROR)
    if check_batch_size(batch_size) == "auto":
        on_gpu = next(model.parameters()).device.type == "cuda"
        batch, largest = ("auto", AUTO_MAX_BATCH) if on_gpu else (AUTO_CPU_BATCH, AUTO_CPU_BATCH)
    else:
        batch, largest = int(batch_size), int(batch_size)
    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch, max_batch_size=largest, max_length=max_length,
                add_bos_token=add_bos_token)


_JINJA: dict = {}


def cache_templates(enable: bool = True) -> None:
    """Compile each of lm-eval's Jinja prompt templates once (``enable`` False undoes it).

    lm-eval renders every prompt, target and choice with ``env.from_string(template)``, which
    compiles the template again for every document: 90 % of the time spent rendering training
    examples and half of a validation pass on the mini world's tasks (``bench/bench_pipeline.py``).
    The compiled templates are kept in an LRU cache on lm-eval's (module-level) Jinja environment;
    what they render is unchanged.
    """
    from lm_eval import utils

    env = utils.env
    original = _JINJA.setdefault("from_string", env.from_string)
    if not enable:
        env.from_string = original
        return
    if getattr(env.from_string, "cached", False):
        return
    compile_once = functools.lru_cache(maxsize=4096)(original)

    def from_string(source, globals=None, template_class=None):
        if globals is None and template_class is None and isinstance(source, str):
            return compile_once(source)
        return original(source, globals, template_class)

    from_string.cached = True
    env.from_string = from_string


# ---------------------------------------------------------------------------------------------
# evaluation


@dataclass
class Outcome:
    """The score of one evaluation and its per-item values."""
    score: float
    stderr: float | None
    metric: str
    filter: str
    n: int
    doc_ids: list[int]
    correct: list[float] | None          # per-item correctness in [0, 1] (None for perplexity)
    seconds: float
    extra: dict = field(default_factory=dict)
    tokens: int = 0                      # tokens through the model: contexts, continuations, generations
    n_params: int = 0                    # the model's parameters (forward FLOPs ~ 2 x n_params x tokens)


def _per_item(metric: str, value: Any) -> float | None:
    if metric == "mcc" or metric == "f1":        # (gold, pred): per-item accuracy
        gold, pred = value
        return float(gold == pred)
    if isinstance(value, (int, float)):
        return float(value)
    return None                                  # (loglikelihood, length) tuples of perplexity


def evaluate(lm, task, info: TaskInfo, role: str, doc_ids: list[int], *, chat_template: bool = False,
             bootstrap_iters: int = 0, seed: int = 0, max_gen_toks: int = 0) -> Outcome:
    """Evaluate ``role`` ("validation" or "test") of ``task`` (splits installed by
    :func:`lib.pipeline.tasks.install_splits`; ``doc_ids`` are the plan's ids of that role).
    ``max_gen_toks`` > 0 caps generation at that many tokens (the paper passed lm-eval's
    ``gen_kwargs="max_gen_toks=256"``); 0 keeps the task's own setting."""
    from lm_eval import evaluator

    cache_templates()
    if max_gen_toks and info.kind == "generate_until":
        task.set_config(key="generation_kwargs", value={"max_gen_toks": int(max_gen_toks)}, update=True)
    use_split(task, role)
    task.set_fewshot_seed(seed=seed)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    t0 = time.time()
    res = evaluator.evaluate(lm=lm, task_dict={"tasks": {info.name: task}, "groups": {}, "group_map": {}},
                             log_samples=True, bootstrap_iters=bootstrap_iters,
                             apply_chat_template=chat_template,
                             fewshot_as_multiturn=chat_template)
    seconds = time.time() - t0
    scores = res["results"][info.name]
    key = info.result_key
    if key not in scores:
        have = sorted(k for k in scores if "," in k and "_stderr" not in k)
        raise TaskError(f"task {info.name!r}: lm-eval reported no {key!r}; it reported {have}")
    stderr = scores.get(f"{info.metric}_stderr,{info.filter}")
    stderr = float(stderr) if isinstance(stderr, (int, float)) else None
    samples = sorted((s for s in res["samples"][info.name] if s["filter"] == info.filter),
                     key=lambda s: s["doc_id"])
    positions = [s["doc_id"] for s in samples]
    n_docs = len(docs(task, role))
    ids = [doc_ids[p] for p in positions] if n_docs == len(doc_ids) else positions
    values = [_per_item(info.metric, s[info.metric]) for s in samples]
    correct = None if any(v is None for v in values) else values
    return Outcome(score=float(scores[key]), stderr=stderr, metric=info.metric, filter=info.filter,
                   n=len(samples), doc_ids=ids, correct=correct, seconds=seconds,
                   extra={"doc_ids_are": "split indices" if n_docs == len(doc_ids) else "positions"},
                   tokens=forward_tokens(lm, samples), n_params=sum(p.numel() for p in lm.model.parameters()))


def forward_tokens(lm, samples: list[dict]) -> int:
    """Tokens the model read or wrote for lm-eval's logged ``samples``: every request's context and
    continuation (a multiple-choice document: one request per choice) and generated text, in the
    model's own tokens (the cost measure: forward FLOPs ~ 2 x parameters x tokens)."""
    total = 0
    for s in samples:
        for args, resps in zip(s["arguments"], s["resps"]):
            texts = [a for a in args if isinstance(a, str)]
            if isinstance(args[-1], dict):            # generate_until: (context, generation kwargs)
                texts += [r for r in resps if isinstance(r, str)]
            total += sum(len(lm.tok_encode(t)) for t in texts if t)
    return total


def versions() -> dict[str, str]:
    import lm_eval
    import peft
    import torch
    import transformers

    from .device import cpu_capability

    return {"lm_eval": lm_eval.__version__, "transformers": transformers.__version__,
            "peft": peft.__version__, "torch": torch.__version__, "cpu_capability": cpu_capability()}


def record(store_root: str | Path, work: str | Path, protocol: str, info: TaskInfo, model: str,
           outcome: Outcome, provenance: dict) -> Path:
    """Write per-item values (none for perplexity corpora, which have no items), then the result
    (the result file is the unit's 'done' marker)."""
    if outcome.correct is not None:
        layout.write_items(work, protocol, info.name, model, metric=outcome.metric, doc_ids=outcome.doc_ids,
                           correct=outcome.correct)
    prov = {"filter": info.filter, "kind": info.kind, "per_item": outcome.correct is not None, "n_test": outcome.n,
            "versions": versions(),
            "eval_seconds": outcome.seconds, "eval_tokens": outcome.tokens, "n_params": outcome.n_params,
            **provenance}
    return store.write(store_root, store.Result(
        protocol=protocol, benchmark=info.name, model=model, metric=info.metric, score=outcome.score,
        stderr=outcome.stderr, higher_is_better=info.higher_is_better, n=outcome.n, provenance=prov))


def default_models(store_root: str | Path) -> list[str]:
    """Models recorded with a local ``path`` in the store's metadata (what a prepare hook built)."""
    meta = store.read_meta(store_root, "models")
    names = sorted(k for k, v in meta.items() if v.get("path"))
    if not names:
        raise ModelError(f"no models given and none with a 'path' in {Path(store_root) / '_meta' / 'models.json'}")
    return names
