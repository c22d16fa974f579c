"""The mini world's model zoo: tiny causal LMs pre-trained on the world's corpus, some of them
"prepared" for test tasks at known doses.

Design (stated before any train-before-test result was looked at)
-----------------------------------------------------------------
- Three families with their own architecture and tokenizer: ``llama`` (BPE vocabulary 512),
  ``gpt2`` (640) and ``gpt_neox`` (384), built with :mod:`lib.pipeline.tiny`. A family shares one
  tokenizer, as hub families do.
- Four capacity levels per family, each with its own pre-training budget (16 x 64 tokens a step):
  ``xs`` (width 48, 1 block, 400 steps), ``s`` (64, 2, 700), ``m`` (96, 3, 900) and ``l``
  (112, 4, 1,200): about 60k to 0.9M parameters and 0.4M to 1.2M tokens, a span of about 40x in
  pre-training compute (6 N D), sized so the whole zoo builds in about 8 minutes on 2 cores. The
  world's facts are Zipf-distributed, so larger and longer-trained models know more of them, and
  every benchmark draws on that knowledge.
- Prepared twins: for two of the sizes of every family (``prepared_sizes``), a twin continues its
  base model on a preparation mix: benchmark-formatted examples (prompt, a space, the gold answer:
  what fine-tuning on the training split shows) of the tasks of one of two task sets
  (:data:`PREP_SETS`), all at one dose (the low or the high one of ``doses``: examples per task),
  plus as many ordinary corpus documents (so the twin does not forget its language). An example
  trains its answer only (the prompt carries no loss), as instruction tuning does; trained on the
  whole text, the answer's one or two tokens were drowned by the prompt's and the twins barely
  differed from their bases under direct evaluation. The number of steps grows with the dose
  (``post_steps`` at the high dose), so every twin sees each example about equally often and a
  higher dose is more preparation. Sets and doses alternate over the twins (:func:`dose_plan`), so
  both sets are prepared at both doses and every task is left unprepared (dose 0, the negative
  control) in half of the twins; the base models are dose 0 on everything. This is how hub models
  get prepared: an instruction-tuning (or contaminated) phase on top of the base model. Twins are
  recorded as ``instruct: true`` with ``base_model`` = their base; their tokens and FLOPs include
  the base model's.

Every recipe (sizes, tokens, FLOPs, preparation doses, the sha256 of the exact mix) goes to the
results store as model metadata; :func:`pretraining_mix` rebuilds the mix from the world so a test
can check that each prepared model saw its doses. Models build in parallel processes (one torch
thread each), base models first.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import layout, paths, store
from ..pipeline import tiny, training
from ..util import atomic_dir, atomic_write_json, current, did_you_mean, read_json, sha256_bytes
from . import world as mw

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
                              "tokenizer_docs": TOKENIZER_DOCS, "base": base_key, "builder": BUILDER_VERSION},
                             sort_keys=True)
        return sha256_bytes(payload)[:16]


# Bump when a change to how a model is built (training.pretrain, the mix, the tokenizer) alters what
# a build produces: cached models are keyed on their recipe, the world's data and this number, not
# on source files, so a comment or docstring edit rebuilds nothing. 2: twins train answers only.
BUILDER_VERSION = 2

SIZES = {"xs": dict(d_model=48, n_layers=1, n_heads=4, steps=400),
         "s": dict(d_model=64, n_layers=2, n_heads=4, steps=700),
         "m": dict(d_model=96, n_layers=3, n_heads=4, steps=900),
         "l": dict(d_model=112, n_layers=4, n_heads=4, steps=1200)}


# the mini profile's five tasks (mw_quiz stays out: at chance for every model even after fine-tuning,
# params/mini.yaml), in two sets; a twin is prepared for all tasks of one set
PREP_SETS = (("mw_facts", "mw_recall", "mw_reading"), ("mw_cloze", "mw_scripts"))


def dose_plan(n_twins: int, doses: tuple[int, int]) -> list[dict[str, int]]:
    """Doses of each twin, in the order of :func:`default_zoo` (family by family, two sizes each):
    one dose for the tasks of one of the two task sets of :data:`PREP_SETS`. Over six twins
    both sets meet both sizes and both doses, and every task stays unprepared (dose 0, the negative
    control) in half of the twins."""
    return [{t: doses[(i + i // 4) % 2] for t in PREP_SETS[(i + i // 2) % 2]} for i in range(n_twins)]


def default_zoo(doses: tuple[int, int] = (150, 600), post_steps: int = 400, post_lr: float = 1e-3,
                families: Iterable[str] = ("llama", "gpt2", "gpt_neox"),
                sizes: Iterable[str] = ("xs", "s", "m", "l"), prepared_sizes: Iterable[str] = ("s", "l"),
                scale: float = 1.0) -> list[Recipe]:
    """The mini profile's zoo: every (family, size) as a base model, and a prepared twin of each
    size in ``prepared_sizes``. ``scale`` multiplies every step count (the tests use a fraction)."""
    sizes, prepared_sizes = list(sizes), list(prepared_sizes)
    unknown = sorted(set(sizes) - set(SIZES)) + sorted(set(prepared_sizes) - set(sizes))
    if unknown:
        raise ZooError(f"zoo: unknown or unbuilt size(s) {unknown}; sizes: {list(SIZES)} (prepared sizes must "
                       "be among the built ones)")
    if len(doses) != 2 or not all(isinstance(d, int) and d > 0 for d in doses):
        raise ZooError(f"zoo: doses must be two positive integers (low, high), got {doses!r}")
    bases, twins = [], []
    for family in families:
        for size in sizes:
            spec = dict(SIZES[size])
            spec["steps"] = max(1, int(round(spec["steps"] * scale)))
            base = Recipe(name=f"mw-{family}-{size}", family=family, **spec).validate()
            bases.append(base)
            if size in prepared_sizes:
                twins.append(Recipe(name=f"{base.name}-prep", family=family,
                                    **{**spec, "steps": max(1, int(round(post_steps * scale)))}, lr=post_lr,
                                    base=base.name))
    plans = dose_plan(len(twins), tuple(doses))
    # steps in proportion to the dose: every twin sees each of its examples about equally often, so
    # a higher dose is more preparation (more examples, more steps), not the same steps spread thinner
    return bases + [Recipe(**{**asdict(t), "prepared": plan,
                              "steps": max(1, int(round(t.steps * max(plan.values()) / max(doses))))}).validate()
                    for t, plan in zip(twins, plans)]


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
    examples = _prompt_lengths(world_dir, counts)
    prep_chars = sum(len(d) for d in docs if d in examples)
    record = {"corpus_docs": len(docs) - n_prep, "prepared": counts, "prepared_docs": n_prep,
              "prepared_char_share": prep_chars / max(1, chars),
              "sha256": sha256_bytes("\n".join(docs))}
    return docs, record


def _prompt_lengths(world_dir: str | Path, counts: dict[str, int]) -> dict[str, int]:
    """``{formatted example: length of its prompt}`` for the prepared tasks: the preparation trains
    an example's answer only (the prompt carries no loss), as instruction tuning does."""
    return {mw.example_text(t, r): len(mw.prompt_text(t, r))
            for t in counts for r in mw.load_split(world_dir, t, "train")}


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


def _tokenizer_dir(models_dir: str | Path, family: str, world_key: str) -> Path:
    return Path(models_dir) / f"_tokenizer-{family}-{world_key}"


def _build_one(world_dir: str, models_dir: str, recipe: dict, world_key: str, base_key: str,
               base_stats: dict | None) -> dict:
    """Pre-train (or prepare) one model and write its build record; runs in a worker process."""
    from ..pipeline.device import setup_torch

    setup_torch()
    recipe = Recipe(**recipe)
    t0 = time.time()
    docs, mix = pretraining_mix(world_dir, recipe)
    if recipe.base:
        model, tok = tiny.load(model_dir(models_dir, recipe.base))
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(_tokenizer_dir(models_dir, recipe.family, world_key))
        model = tiny.make_model(recipe.family, tok, d_model=recipe.d_model, n_layers=recipe.n_layers,
                                n_heads=recipe.n_heads, max_len=256, seed=recipe.seed)
    prompts = _prompt_lengths(world_dir, mix["prepared"])
    stats = training.pretrain(model, tok, docs, steps=recipe.steps, batch_size=recipe.batch_size,
                              seq_len=recipe.seq_len, lr=recipe.lr, seed=recipe.seed,
                              out_dir=model_dir(models_dir, recipe.name),
                              prompt_chars=[prompts.get(d, 0) for d in docs] if prompts else None)
    own = {k: v for k, v in stats.items() if k != "loss_curve"}
    before = base_stats or {"tokens": 0, "flops": 0.0}
    total = {"tokens": before["tokens"] + own["tokens"], "flops": before["flops"] + own["flops"]}
    rec = {"key": recipe.key(world_key, base_key), "recipe": asdict(recipe), "mix": mix,
           "path": str(model_dir(models_dir, recipe.name).resolve()),
           "stats": {**own, **total, "own_tokens": own["tokens"], "own_flops": own["flops"]},
           "loss_curve": stats["loss_curve"], "build_seconds": time.time() - t0}
    atomic_write_json(_sidecar(models_dir, recipe.name), rec)
    return rec


def build_zoo(world_dir: str | Path, models_dir: str | Path, recipes: list[Recipe],
              progress: bool = True, workers: int | None = None) -> dict[str, dict]:
    """Pre-train every recipe not yet built (cached per model); returns name -> build record.

    Base models build first, then the prepared twins, each phase in ``workers`` processes (default:
    the CPU count), largest models first so the workers finish together.
    """
    world_dir = Path(world_dir)
    world_key = read_json(world_dir / "manifest.json")["content"]      # what the world holds (world.content_key)
    recipes = _ordered([r.validate() for r in recipes])
    workers = max(1, workers or os.cpu_count() or 1)
    out: dict[str, dict] = {}
    for phase in ([r for r in recipes if not r.base], [r for r in recipes if r.base]):
        todo = []
        for recipe in phase:
            base_key = out[recipe.base]["key"] if recipe.base else ""
            done = built_recipe(models_dir, recipe, world_key, base_key)
            if done is not None:
                out[recipe.name] = {**done, "path": str(model_dir(models_dir, recipe.name).resolve())}  # repo may move
            else:
                todo.append((recipe, base_key))
        for family in sorted({r.family for r, _ in todo if not r.base}):
            folder = _tokenizer_dir(models_dir, family, world_key)
            if not (folder / "tokenizer.json").exists():
                atomic_dir(folder, family_tokenizer(world_dir, family).save_pretrained)
        todo.sort(key=lambda rb: -rb[0].d_model ** 2 * rb[0].n_layers * rb[0].steps)
        args = [(str(world_dir), str(models_dir), asdict(r), world_key, base_key,
                 out[r.base]["stats"] if r.base else None) for r, base_key in todo]
        if workers > 1 and len(args) > 1:
            import multiprocessing

            with ProcessPoolExecutor(max_workers=min(workers, len(args)),
                                     mp_context=multiprocessing.get_context("spawn")) as pool:
                records = list(pool.map(_build_one, *zip(*args)))
        else:
            records = [_build_one(*a) for a in args]
        for (recipe, _), rec in zip(todo, records):
            out[recipe.name] = rec
            if progress:
                st = rec["stats"]
                print(f"  zoo: {recipe.name}: {st['n_params']:,} params, {st['own_tokens']:,} tokens"
                      f"{' of preparation' if recipe.base else ''}, loss {st['final_loss']:.2f}, "
                      f"{rec['build_seconds']:.1f}s", flush=True)
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
    return layout.world_dir(paths.work_dir(profile))


def models_dir(profile: str) -> Path:
    return layout.models_dir(paths.work_dir(profile))


def prepare(profile: str, seed: int = 0, doses: tuple[int, int] = (150, 600), post_steps: int = 400,
            post_lr: float = 1e-3, scale: float = 1.0, families: list[str] | None = None,
            sizes: list[str] | None = None, prepared_sizes: list[str] | None = None, workers: int | None = None,
            **world_sizes) -> dict:
    """Prepare hook of the mini profile: build the world and the zoo, record their metadata.

    Cached: the world by its config key, each model by its recipe key, so a second run rebuilds
    nothing. ``world_sizes`` are :class:`lib.miniworld.world.WorldConfig` fields; the zoo options
    are :func:`default_zoo`'s; ``workers`` processes build the models (default: the CPU count).
    """
    unknown = sorted(set(world_sizes) - set(mw.WorldConfig.__dataclass_fields__))
    if unknown:
        raise ZooError(f"miniworld prepare: unknown option(s) {unknown}{did_you_mean(unknown[0], ZOO_OPTIONS)}; "
                       f"world options: {sorted(mw.WorldConfig.__dataclass_fields__)}, zoo options: {ZOO_OPTIONS}")
    cfg = mw.WorldConfig(seed=seed, **world_sizes)
    t0 = time.time()
    manifest = mw.build(world_dir(profile), cfg)
    chosen = {k: v for k, v in (("families", families), ("sizes", sizes), ("prepared_sizes", prepared_sizes))
              if v is not None}
    recipes = default_zoo(doses=tuple(doses), post_steps=post_steps, post_lr=post_lr, scale=scale, **chosen)
    builds = build_zoo(world_dir(profile), models_dir(profile), recipes, workers=workers)
    root = paths.store_dir(profile)
    store.write_meta(root, "models", {name: {**rec, "path": store.relative_meta_path(root, rec["path"])}  # moves with
                                      for name, rec in model_meta(builds).items()})               # outputs/
    store.write_meta(root, "benchmarks", mw.benchmark_meta())
    summary = {"world_key": manifest["key"], "task_dir": manifest["task_dir"], "models": list(builds),
               "seconds": time.time() - t0}
    atomic_write_json(layout.zoo_summary_path(paths.work_dir(profile)), summary)
    return summary


ZOO_OPTIONS = ["doses", "post_steps", "post_lr", "scale", "families", "sizes", "prepared_sizes", "workers"]
