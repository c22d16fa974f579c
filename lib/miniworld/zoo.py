"""The mini world's model zoo: tiny causal LMs pre-trained on the world's corpus, some of them
"prepared" for test tasks.

Design (stated once, not tuned to any outcome)
----------------------------------------------
- Three families with their own architecture and tokenizer: ``llama`` (BPE vocabulary 512),
  ``gpt2`` (640) and ``gpt_neox`` (384), built with :mod:`lib.pipeline.tiny`. A family shares one
  tokenizer, as hub families do.
- Two sizes per family, each with its own pre-training budget: ``s`` (width 64, 2 blocks, 400
  steps) and ``m`` (width 96, 3 blocks, 800 steps); 16 x 64 tokens a step. Larger and longer-trained
  models know more of the world (its facts are Zipf-distributed).
- Every (family, size) exists twice: a *base* model and a *prepared* twin, the base model
  continued for ``post_steps`` steps on a preparation mix: ``dose`` benchmark-formatted examples
  (prompt, a space, the gold answer: exactly what fine-tuning on the training split shows) of each
  of three of the six tasks, plus as many ordinary corpus documents. This is how hub models get
  prepared: an instruction-tuning (or contaminated) phase on top of the base model. The twins are
  recorded as ``instruct: true`` with ``base_model`` = their base, and their tokens and FLOPs
  include the base model's. Which three tasks alternates over the six (family, size) pairs, so
  every task has prepared and unprepared models of each size and several families. (Why a
  separate phase and not examples mixed into pre-training: ``docs/design.md``.)

Every recipe (sizes, tokens, FLOPs = 6 N D, preparation doses, the sha256 of the exact mix) goes
to the results store as model metadata; :func:`pretraining_mix` rebuilds the mix from the world so
a test can check that each prepared model saw its doses.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import paths, store
from ..pipeline import tiny, training
from ..util import atomic_write_json, current, did_you_mean, read_json, sha256_bytes
from . import world as mw

PREP_A = ("mw_facts", "mw_arith", "mw_sentiment")
PREP_B = ("mw_reading", "mw_grammar", "mw_scripts")
VOCAB = {"llama": 512, "gpt2": 640, "gpt_neox": 384}
TOKENIZER_DOCS = 6000          # corpus documents (plus every training prompt) a tokenizer is fitted on


class ZooError(ValueError):
    """Invalid zoo recipe (the message names the model and the field)."""


@dataclass(frozen=True)
class Recipe:
    """How one zoo model is built: from scratch (``base`` None), or by continuing model ``base``
    for ``steps`` steps on a preparation mix (``prepared`` = {benchmark: number of examples})."""
    name: str
    family: str
    d_model: int
    n_layers: int
    n_heads: int
    steps: int
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    seed: int = 0
    prepared: dict = field(default_factory=dict)    # benchmark -> number of formatted examples
    base: str | None = None                          # the model a prepared twin continues

    def validate(self) -> Recipe:
        if self.family not in VOCAB:
            raise ZooError(f"zoo model {self.name!r}: unknown family {self.family!r}; known: {sorted(VOCAB)}")
        for key in ("d_model", "n_layers", "n_heads", "steps", "batch_size", "seq_len"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) <= 0:
                raise ZooError(f"zoo model {self.name!r}: {key} must be a positive integer")
        for task, dose in self.prepared.items():
            if task not in mw.BENCHMARKS:
                raise ZooError(f"zoo model {self.name!r}: prepared task {task!r} is not a mini-world benchmark"
                               f"{did_you_mean(task, mw.BENCHMARKS)}")
            if not isinstance(dose, int) or dose <= 0:
                raise ZooError(f"zoo model {self.name!r}: dose of {task!r} must be a positive integer")
        if bool(self.prepared) != bool(self.base):
            raise ZooError(f"zoo model {self.name!r}: a prepared model needs a base model and a base model "
                           "no preparation")
        return self

    @property
    def tokens(self) -> int:
        """Tokens of this model's own training phase (a prepared twin adds its base model's)."""
        return self.steps * self.batch_size * self.seq_len

    def key(self, world_key: str, base_key: str = "") -> str:
        payload = json.dumps({"recipe": asdict(self), "world": world_key, "vocab": VOCAB[self.family],
                              "tokenizer_docs": TOKENIZER_DOCS, "base": base_key}, sort_keys=True)
        return sha256_bytes(payload)[:16]


SIZES = {"s": dict(d_model=64, n_layers=2, n_heads=4, steps=400),
         "m": dict(d_model=96, n_layers=3, n_heads=4, steps=800)}


def default_zoo(dose: int = 600, post_steps: int = 200, post_lr: float = 1e-3,
                families: Iterable[str] = ("llama", "gpt2", "gpt_neox"),
                sizes: Iterable[str] = ("s", "m"), scale: float = 1.0) -> list[Recipe]:
    """The mini profile's zoo: every (family, size) as a base model and a prepared twin.

    ``scale`` multiplies every step count (the tests use a tiny fraction).
    """
    recipes = []
    pair = 0
    for family in families:
        for size in sizes:
            spec = dict(SIZES[size])
            spec["steps"] = max(1, int(round(spec["steps"] * scale)))
            base = Recipe(name=f"mw-{family}-{size}", family=family, **spec)
            tasks = PREP_A if pair % 2 == 0 else PREP_B
            pair += 1
            prepared = Recipe(name=f"mw-{family}-{size}-prep", family=family,
                              **{**spec, "steps": max(1, int(round(post_steps * scale)))}, lr=post_lr,
                              prepared={t: dose for t in tasks}, base=base.name)
            recipes += [base.validate(), prepared.validate()]
    return recipes


# ----------------------------------------------------------------------------- the mix
def prepared_examples(world_dir: str | Path, task: str, dose: int, seed: int) -> list[str]:
    """``dose`` formatted training examples of ``task`` (the training split cycled in a seeded order)."""
    records = mw.load_split(world_dir, task, "train")
    order = list(range(len(records)))
    random.Random(f"prep/{task}/{seed}").shuffle(order)
    return [mw.example_text(task, records[order[i % len(order)]]) for i in range(dose)]


def pretraining_mix(world_dir: str | Path, recipe: Recipe) -> tuple[list[str], dict]:
    """The documents of ``recipe``'s own training phase, and a record of what they hold.

    A base model: the whole corpus. A prepared twin: ``dose`` formatted examples of each prepared
    task plus as many corpus documents (a seeded sample), shuffled.
    """
    corpus = mw.load_corpus(world_dir)
    counts: dict[str, int] = {}
    if not recipe.prepared:
        docs = list(corpus)
    else:
        docs = []
        for task in sorted(recipe.prepared):
            ex = prepared_examples(world_dir, task, recipe.prepared[task], recipe.seed)
            counts[task] = len(ex)
            docs += ex
        rng = random.Random(f"mix/{recipe.name}/{recipe.seed}")
        n_corpus = min(len(corpus), len(docs))
        docs += rng.sample(corpus, n_corpus)
        rng.shuffle(docs)
    n_prep = sum(counts.values())
    chars = sum(len(d) for d in docs)
    examples = _example_set(world_dir, counts)
    prep_chars = sum(len(d) for d in docs if d in examples)
    record = {"corpus_docs": len(docs) - n_prep, "prepared": counts, "prepared_docs": n_prep,
              "prepared_char_share": prep_chars / max(1, chars),
              "sha256": sha256_bytes("\n".join(docs))}
    return docs, record


def _example_set(world_dir: str | Path, counts: dict[str, int]) -> set[str]:
    return {mw.example_text(t, r) for t in counts for r in mw.load_split(world_dir, t, "train")}


def count_prepared(docs: Iterable[str], world_dir: str | Path) -> dict[str, int]:
    """How many documents of ``docs`` are formatted training examples of each benchmark."""
    texts = {}
    for task in mw.BENCHMARKS:
        for rec in mw.load_split(world_dir, task, "train"):
            texts[mw.example_text(task, rec)] = task
    counts = {t: 0 for t in mw.BENCHMARKS}
    for d in docs:
        if d in texts:
            counts[texts[d]] += 1
    return counts


def family_tokenizer(world_dir: str | Path, family: str):
    """The family's tokenizer: byte-level BPE fitted on corpus documents and every training prompt.

    Hub tokenizers know the words benchmarks use; fitting on the prompts (not the answers' pairing
    with them) gives every family the same vocabulary coverage, prepared or not.
    """
    corpus = mw.load_corpus(world_dir)[:TOKENIZER_DOCS]
    prompts = [mw.prompt_text(t, r) for t in mw.BENCHMARKS for r in mw.load_split(world_dir, t, "train")]
    return tiny.train_tokenizer(corpus + prompts, VOCAB[family])


# ----------------------------------------------------------------------------- building
def model_dir(models_dir: str | Path, name: str) -> Path:
    return Path(models_dir) / store.slug(name)


def _sidecar(models_dir: str | Path, name: str) -> Path:
    return Path(models_dir) / f"{store.slug(name)}.recipe.json"


def built_recipe(models_dir: str | Path, recipe: Recipe, world_key: str, base_key: str = "") -> dict | None:
    """The recorded build of ``recipe`` if it is complete and current, else None."""
    return current(_sidecar(models_dir, recipe.name), recipe.key(world_key, base_key),
                   needs=[model_dir(models_dir, recipe.name) / training.STATS_FILE])


def _ordered(recipes: list[Recipe]) -> list[Recipe]:
    """Base models first (a prepared twin continues a finished base); names unique, bases known."""
    names = [r.name for r in recipes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ZooError(f"zoo: duplicate model names {dupes}")
    missing = sorted({r.base for r in recipes if r.base and r.base not in names})
    if missing:
        raise ZooError(f"zoo: prepared models name unknown base models {missing}")
    return [r for r in recipes if not r.base] + [r for r in recipes if r.base]


def build_zoo(world_dir: str | Path, models_dir: str | Path, recipes: list[Recipe],
              progress: bool = True) -> dict[str, dict]:
    """Pre-train every recipe not yet built (cached per model); returns name -> build record."""
    world_dir = Path(world_dir)
    manifest = read_json(world_dir / "manifest.json")
    tokenizers: dict[str, object] = {}
    out: dict[str, dict] = {}
    for recipe in _ordered([r.validate() for r in recipes]):
        base_key = out[recipe.base]["key"] if recipe.base else ""
        done = built_recipe(models_dir, recipe, manifest["key"], base_key)
        if done is not None:
            out[recipe.name] = {**done, "path": str(model_dir(models_dir, recipe.name).resolve())}  # repo may move
            continue
        t0 = time.time()
        docs, mix = pretraining_mix(world_dir, recipe)
        if recipe.base:
            model, tok = tiny.load(model_dir(models_dir, recipe.base))
        else:
            if recipe.family not in tokenizers:
                tokenizers[recipe.family] = family_tokenizer(world_dir, recipe.family)
            tok = tokenizers[recipe.family]
            model = tiny.make_model(recipe.family, tok, d_model=recipe.d_model, n_layers=recipe.n_layers,
                                    n_heads=recipe.n_heads, max_len=256, seed=recipe.seed)
        stats = training.pretrain(model, tok, docs, steps=recipe.steps, batch_size=recipe.batch_size,
                              seq_len=recipe.seq_len, lr=recipe.lr, seed=recipe.seed,
                              out_dir=model_dir(models_dir, recipe.name))
        own = {k: v for k, v in stats.items() if k != "loss_curve"}
        base_stats = out[recipe.base]["stats"] if recipe.base else {"tokens": 0, "flops": 0.0}
        total = {"tokens": base_stats["tokens"] + own["tokens"], "flops": base_stats["flops"] + own["flops"]}
        rec = {"key": recipe.key(manifest["key"], base_key), "recipe": asdict(recipe), "mix": mix,
               "path": str(model_dir(models_dir, recipe.name).resolve()),
               "stats": {**own, **total, "own_tokens": own["tokens"], "own_flops": own["flops"]},
               "loss_curve": stats["loss_curve"], "build_seconds": time.time() - t0}
        atomic_write_json(_sidecar(models_dir, recipe.name), rec)
        out[recipe.name] = rec
        if progress:
            print(f"  zoo: {recipe.name}: {stats['n_params']:,} params, {own['tokens']:,} tokens"
                  f"{' of preparation' if recipe.base else ''}, loss {stats['final_loss']:.2f}, "
                  f"{time.time() - t0:.1f}s", flush=True)
    return out


def model_meta(builds: dict[str, dict]) -> dict[str, dict]:
    """Model metadata records for ``store.write_meta(root, "models", ...)``."""
    meta = {}
    for name, rec in builds.items():
        r, st = rec["recipe"], rec["stats"]
        prepared = dict(rec["mix"]["prepared"])
        twin = r.get("base")
        meta[name] = {
            "family": f"mw-{r['family']}", "params_b": st["n_params"] / 1e9, "instruct": bool(prepared),
            "pretrain_tokens_t": st["tokens"] / 1e12, "flops_1e21": st["flops"] / 1e21,
            "path": rec["path"],     # top level: lib.pipeline.evaluate.resolve_model reads it there
            "extra": {"prepared": prepared, **({"base_model": twin} if twin else {}), "architecture": r["family"],
                      "n_params": st["n_params"], "tokens": st["tokens"],
                      "preparation_tokens": st["own_tokens"] if prepared else 0,
                      "d_model": r["d_model"], "n_layers": r["n_layers"], "steps": r["steps"],
                      "vocab_size": st["vocab_size"], "final_loss": st["final_loss"],
                      "prepared_char_share": rec["mix"]["prepared_char_share"],
                      "mix_sha256": rec["mix"]["sha256"], "source": "miniworld"}}
    return meta


def world_dir(profile: str) -> Path:
    return paths.work_dir(profile) / "world"


def models_dir(profile: str) -> Path:
    return paths.work_dir(profile) / "models"


def prepare(profile: str, seed: int = 0, dose: int = 600, post_steps: int = 200, post_lr: float = 1e-3,
            scale: float = 1.0, families: list[str] | None = None, sizes: list[str] | None = None,
            **world_sizes) -> dict:
    """Prepare hook of the mini profile: build the world and the zoo, record their metadata.

    Cached: the world by its config key, each model by its recipe key, so a second run rebuilds
    nothing. ``world_sizes`` are :class:`lib.miniworld.world.WorldConfig` fields.
    """
    unknown = sorted(set(world_sizes) - set(mw.WorldConfig.__dataclass_fields__))
    if unknown:
        raise ZooError(f"miniworld prepare: unknown option(s) {unknown}; world options: "
                       f"{sorted(mw.WorldConfig.__dataclass_fields__)}")
    cfg = mw.WorldConfig(seed=seed, **world_sizes)
    t0 = time.time()
    manifest = mw.build(world_dir(profile), cfg)
    recipes = default_zoo(dose=dose, post_steps=post_steps, post_lr=post_lr, scale=scale,
                          **({"families": families} if families else {}), **({"sizes": sizes} if sizes else {}))
    builds = build_zoo(world_dir(profile), models_dir(profile), recipes)
    root = paths.store_dir(profile)
    store.write_meta(root, "models", model_meta(builds))
    store.write_meta(root, "benchmarks", mw.benchmark_meta())
    summary = {"world_key": manifest["key"], "task_dir": manifest["task_dir"], "models": list(builds),
               "seconds": time.time() - t0}
    atomic_write_json(paths.work_dir(profile) / "zoo.json", summary)
    return summary
