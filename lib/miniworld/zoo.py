"""The mini world's model zoo: tiny causal LMs pre-trained on the world's corpus, some of them
*prepared* for the test tasks, in named kinds and at known doses.

Design (stated before any result of this version was looked at)
---------------------------------------------------------------
Every zoo model is pre-trained in two phases, as hub models are (a long phase on web text, then a
short last phase whose mix decides much of how the model behaves on benchmarks):

1. A *trunk* per (family, size): three families with their own architecture and tokenizer
   (``llama`` BPE vocabulary 512, ``gpt2`` 640, ``gpt_neox`` 384; :mod:`lib.pipeline.tiny`), four
   capacity levels each with its own budget (16 x 64 tokens a step): ``xs`` (width 48, 1 block, 400
   steps), ``s`` (64, 2, 700), ``m`` (96, 3, 900), ``l`` (112, 4, 1,200), about 60k to 0.9M
   parameters, a span of about 40x in pre-training compute (6 N D). Windows start at document
   starts. The world's facts are Zipf-distributed, so larger and longer-trained models know more.
2. A *last phase* of ``post_examples`` corpus documents (the same for every model of a trunk),
   ``post_epochs`` epochs, every parameter trained (:func:`lib.pipeline.training.posttrain`), to
   which a model's kind *adds* ``dose x post_examples`` documents, shuffled in:

   - ``base``: nothing (the unprepared model every other kind is compared with);
   - ``sham``: corpus documents of another sample (the control: what a twin gains from as much more
     text that is not preparation; its lead should be near 0);
   - ``format`` (format exposure in pre-training): question-answer text in generic formats
     (:func:`lib.miniworld.world.qa_document`, loss on every token, none of the benchmark items);
   - ``instruct`` (instruction-style): instruction examples in eight task formats that resemble the
     benchmarks without being them (:func:`lib.miniworld.world.instruct_example`), the loss on the
     response only;
   - ``contam`` (contamination, "training on the test task"): formatted examples of the benchmarks'
     own *training* splits, for one of two task sets (:data:`TASK_SETS`), the loss on the answer only;
   - ``answers`` (the positive control): the same with the *test* splits' items and answers; its lead
     should survive fine-tuning.

   A twin therefore sees exactly its base's last phase plus its preparation: what it knows of the
   corpus is its base's, and the difference between the two is the preparation alone. (World v5's
   first zoo *replaced* a share of the last phase instead; in probes its format twins forgot corpus
   knowledge, up to -0.3 on mw_facts and mw_cloze, and at the top dose its format and instruct twins
   led their bases by only +0.04 and +0.01 on their own tasks.)

A *twin* is the last phase of kind ``format``, ``instruct`` or ``contam`` at one dose (documents added
per corpus document of the last phase, e.g. 0.25 / 0.5 / 1.0) on top of a base's trunk. Twins are
made for the sizes
``prepared_sizes`` of every family, the kinds a Latin square over families and sizes
(:func:`twin_plan`) and the doses laid out by ``dose_layout``: ``square`` makes a Graeco-Latin
square (each kind meets every family, size and dose once, dose and size separable); ``capacity``
(the mini profile's since the probe of issue 18) gives the smallest dose to the smallest prepared
size and the top dose to the largest, so every kind's top dose is on a base that knows enough to use
it (on a weak base the top format and instruct doses led by only +0.03 and +0.05). Shams are made
for every family at ``sham_size``, the answer-contaminated twin for one (family, size). Every model
is recorded in the store's metadata with its kind, dose, the tasks it was prepared for, its base,
tokens and FLOPs, and the sha256 of its exact mix, which :func:`last_phase_mix` rebuilds from the
world so a test can check what each model saw. Models build in parallel processes (one torch thread
each): trunks first, then every last phase.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import layout, paths, store
from ..errors import UserError
from ..pipeline import tiny, training
from ..progress import tell
from ..util import atomic_dir, atomic_write_json, current, did_you_mean, read_json, sha256_bytes
from . import world as mw

VOCAB = {"llama": 512, "gpt2": 640, "gpt_neox": 384}
TOKENIZER_DOCS = 6000          # corpus documents (plus every training prompt) a tokenizer is fitted on

SIZES = {"xs": dict(d_model=48, n_layers=1, n_heads=4, steps=400),
         "s": dict(d_model=64, n_layers=2, n_heads=4, steps=700),
         "m": dict(d_model=96, n_layers=3, n_heads=4, steps=900),
         "l": dict(d_model=112, n_layers=4, n_heads=4, steps=1200)}

KINDS = ("base", "sham", "format", "instruct", "contam", "answers")
TWIN_KINDS = ("format", "instruct", "contam")          # the three kinds of preparation (doses > 0)
# the tasks each kind of preparation targets ("what it was prepared for"): question-answer text
# prepares for the tasks answered by a bare value after a question; instruction formats resemble
# every task; contamination and the answers prepare for the tasks of their set
TASK_SETS = {"A": ("mw_facts", "mw_recall", "mw_reading"), "B": ("mw_cloze", "mw_scripts", "mw_quiz")}
FORMAT_TASKS = ("mw_recall", "mw_quiz", "mw_reading")

# Bump when a change to how a model is built alters what a build produces: cached models are keyed on
# their recipe, the world's data and these numbers, not on source files, so a comment or docstring
# edit rebuilds nothing. TRUNK_VERSION: pre-training and the tokenizer (3: windows at document
# starts, world v5; 4: tokenizers fitted on the new preparation text); LAST_PHASE_VERSION: the last
# phase and the preparation text it mixes in, so a change there rebuilds the last phases and not the
# trunks (3: preparation added to the base's last phase, not replacing part of it).
TRUNK_VERSION = 4
LAST_PHASE_VERSION = 3


class ZooError(UserError, ValueError):
    """Invalid zoo recipe (the message names the model and the field)."""


@dataclass(frozen=True)
class Trunk:
    """The first, long phase of pre-training of one (family, size), from scratch."""
    family: str
    size: str
    d_model: int
    n_layers: int
    n_heads: int
    steps: int
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    seed: int = 0

    @property
    def name(self) -> str:
        return f"trunk-{self.family}-{self.size}"

    @property
    def tokens(self) -> int:
        return self.steps * self.batch_size * self.seq_len

    def validate(self) -> Trunk:
        if self.family not in VOCAB:
            raise ZooError(f"zoo trunk {self.name!r}: unknown family {self.family!r}; known: {sorted(VOCAB)}")
        for key in ("d_model", "n_layers", "n_heads", "steps", "batch_size", "seq_len"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) <= 0:
                raise ZooError(f"zoo trunk {self.name!r}: {key} must be a positive integer")
        return self

    def key(self, world_key: str) -> str:
        payload = json.dumps({"trunk": asdict(self), "world": world_key, "vocab": VOCAB[self.family],
                              "tokenizer_docs": TOKENIZER_DOCS, "builder": TRUNK_VERSION}, sort_keys=True)
        return sha256_bytes(payload)[:16]


@dataclass(frozen=True)
class Recipe:
    """One zoo model: a trunk and the mix of its last phase (``kind`` at ``dose``, the share of the
    last phase's documents that are preparation; ``tasks`` for ``contam`` and ``answers``)."""
    name: str
    trunk: Trunk
    kind: str = "base"
    dose: float = 0.0
    tasks: tuple[str, ...] = ()
    post_examples: int = 3000
    post_epochs: int = 2
    post_lr: float = 1e-3
    seed: int = 0
    base: str | None = None          # the base model a twin or sham is compared with

    def validate(self) -> Recipe:
        self.trunk.validate()
        if self.kind not in KINDS:
            raise ZooError(f"zoo model {self.name!r}: unknown kind {self.kind!r}{did_you_mean(self.kind, KINDS)}; "
                           f"kinds: {list(KINDS)}")
        for task in self.tasks:
            if task not in mw.BENCHMARKS:
                raise ZooError(f"zoo model {self.name!r}: prepared task {task!r} is not a mini-world benchmark"
                               f"{did_you_mean(task, mw.BENCHMARKS)}")
        if self.kind == "base" and self.dose:
            raise ZooError(f"zoo model {self.name!r}: a base model needs a dose of 0, got {self.dose!r}")
        if self.kind != "base" and not 0 < self.dose <= 1:
            raise ZooError(f"zoo model {self.name!r}: a {self.kind} model needs a dose in (0, 1] (documents added "
                           f"per corpus document of the last phase), got {self.dose!r}")
        if (self.kind in ("contam", "answers")) != bool(self.tasks):
            raise ZooError(f"zoo model {self.name!r}: tasks are given for contam and answers models only")
        if (self.kind != "base") != bool(self.base):
            raise ZooError(f"zoo model {self.name!r}: every model but a base names its base model")
        if self.post_examples < 1 or self.post_epochs < 1:
            raise ZooError(f"zoo model {self.name!r}: post_examples and post_epochs must be positive")
        return self

    @property
    def targets(self) -> tuple[str, ...]:
        """The benchmarks this model was prepared for (none for a base or a sham)."""
        if self.kind in ("contam", "answers"):
            return tuple(self.tasks)
        if self.kind == "format":
            return FORMAT_TASKS
        if self.kind == "instruct":
            return tuple(t for t in mw.BENCHMARKS)
        return ()

    def key(self, world_key: str) -> str:
        payload = json.dumps({"recipe": asdict(self), "world": world_key, "trunk": self.trunk.key(world_key),
                              "last_phase": LAST_PHASE_VERSION}, sort_keys=True)
        return sha256_bytes(payload)[:16]


DOSE_LAYOUTS = ("square", "capacity")


def twin_plan(families: list[str], sizes: list[str], doses: tuple[float, ...],
              kinds: tuple[str, ...] = TWIN_KINDS, dose_layout: str = "square") -> list[tuple[str, str, str, float]]:
    """(family, size, kind, dose) of every twin: family ``f`` at its ``i``-th prepared size gets
    kind ``kinds[(f + i) % len(kinds)]`` (a Latin square: each kind meets every family and every
    size once) and, by ``dose_layout``:

    - ``"square"``: dose ``doses[(2 f + i) % len(doses)]``. With three kinds, three doses, three
      families and three sizes this is a Graeco-Latin square: each kind meets every family, size and
      dose once, and each size has every kind and every dose, so dose and capacity are separable.
    - ``"capacity"``: the ``j``-th smallest dose for the ``j``-th smallest size: the dose rises with
      the base's capacity, so every kind's top dose lands on the largest prepared size. Each kind
      still meets every family, size and dose once, but dose and size are no longer separable. Why a
      zoo would want it: an answer format cannot lift a model above what it knows, so a top dose on
      a weak base tests the base, not the preparation (``params/mini.yaml``, ``docs/journal.md``).
    """
    if dose_layout not in DOSE_LAYOUTS:
        raise ZooError(f"zoo: dose_layout must be one of {list(DOSE_LAYOUTS)}, got {dose_layout!r}")
    if dose_layout == "capacity" and len(doses) != len(sizes):
        raise ZooError(f"zoo: dose_layout 'capacity' needs one dose per prepared size, got {len(doses)} "
                       f"dose(s) for {len(sizes)} size(s) {list(sizes)}")
    if dose_layout == "capacity":
        by_capacity = dict(zip(sorted(sizes, key=list(SIZES).index), sorted(doses)))

    def dose(f: int, i: int) -> float:
        return by_capacity[sizes[i]] if dose_layout == "capacity" else doses[(2 * f + i) % len(doses)]

    return [(fam, size, kinds[(f + i) % len(kinds)], dose(f, i))
            for f, fam in enumerate(families) for i, size in enumerate(sizes)]


def default_zoo(doses: tuple[float, ...] = (0.25, 0.5, 1.0), families: Iterable[str] = ("llama", "gpt2", "gpt_neox"),
                sizes: Iterable[str] = ("xs", "s", "m", "l"), prepared_sizes: Iterable[str] = ("s", "m", "l"),
                sham_size: str | None = "m", answers: tuple[str, str] | None = ("gpt_neox", "m"),
                answers_dose: float = 0.5, twin_kinds: Iterable[str] = TWIN_KINDS, post_examples: int = 3000,
                post_epochs: int = 2, post_lr: float = 1e-3, extra_twins: Iterable[Iterable] = (),
                scale: float = 1.0, dose_layout: str = "square") -> list[Recipe]:
    """The mini profile's zoo: a base of every (family, size), the twins of :func:`twin_plan`, a sham
    of every family at ``sham_size`` (None: no shams) and one answer-contaminated twin at
    ``answers`` (None: none). ``dose_layout``: how the twins' doses meet the sizes
    (:func:`twin_plan`). ``extra_twins``: more twins outside the square, each ``[family, size, kind,
    dose]`` (a ``contam`` twin adds the name of its task set, :data:`TASK_SETS`), for probes such as
    ``params/probe_top_dose.yaml``. ``scale`` multiplies every step and document count (tests)."""
    families, sizes, prepared_sizes = list(families), list(sizes), list(prepared_sizes)
    unknown = sorted(set(sizes) - set(SIZES)) + sorted(set(prepared_sizes) - set(sizes))
    if sham_size is not None and sham_size not in sizes:
        unknown.append(sham_size)
    if unknown:
        raise ZooError(f"zoo: unknown or unbuilt size(s) {unknown}; sizes: {list(SIZES)} (prepared, sham and answers "
                       "sizes must be among the built ones)")
    twin_kinds = tuple(twin_kinds)
    bad = [k for k in twin_kinds if k not in TWIN_KINDS]
    if bad or not twin_kinds:
        raise ZooError(f"zoo: twin kinds must be among {list(TWIN_KINDS)}, got {list(twin_kinds)}")
    if not doses or not all(isinstance(d, (int, float)) and 0 < d <= 1 for d in doses):
        raise ZooError(f"zoo: doses must be shares in (0, 1], got {doses!r}")
    post = dict(post_examples=max(1, int(round(post_examples * scale))), post_epochs=post_epochs, post_lr=post_lr)
    trunks = {}
    out = []
    for fam in families:
        for size in sizes:
            spec = dict(SIZES[size])
            spec["steps"] = max(1, int(round(spec["steps"] * scale)))
            trunks[fam, size] = Trunk(family=fam, size=size, **spec).validate()
            out.append(Recipe(name=f"mw-{fam}-{size}", trunk=trunks[fam, size], **post))
    contam = 0
    for fam, size, kind, dose in twin_plan(families, prepared_sizes, tuple(doses), twin_kinds, dose_layout):
        tasks = ()
        if kind == "contam":
            tasks, contam = TASK_SETS["AB"[contam % 2]], contam + 1
        out.append(_derived(trunks[fam, size], kind, dose, post, tasks))
    if sham_size is not None:
        sham_dose = sorted(doses)[len(doses) // 2]
        for fam in families:
            out.append(_derived(trunks[fam, sham_size], "sham", sham_dose, post, dose_in_name=False))
    if answers is not None and answers[0] in families and answers[1] in sizes:
        fam, size = answers
        out.append(_derived(trunks[fam, size], "answers", answers_dose, post, TASK_SETS["A"]))
    for extra in extra_twins:
        out.append(_extra_twin(list(extra), trunks, post))
    return _check([r.validate() for r in out])


def _extra_twin(extra: list, trunks: dict, post: dict) -> Recipe:
    """The recipe of one ``[family, size, kind, dose(, task set)]`` entry of ``extra_twins``."""
    shape = "[family, size, kind, dose] (a contam twin: [family, size, 'contam', dose, task set])"
    if len(extra) not in (4, 5):
        raise ZooError(f"zoo: extra twin {extra!r}: expected {shape}")
    fam, size, kind, dose, *rest = extra
    if (fam, size) not in trunks:
        raise ZooError(f"zoo: extra twin {extra!r}: ({fam}, {size}) is not among the built (family, size) "
                       f"pairs {sorted(trunks)}")
    if kind not in TWIN_KINDS:
        raise ZooError(f"zoo: extra twin {extra!r}: kind must be one of {list(TWIN_KINDS)}"
                       f"{did_you_mean(kind, TWIN_KINDS)}")
    if (kind == "contam") != bool(rest) or (rest and rest[0] not in TASK_SETS):
        raise ZooError(f"zoo: extra twin {extra!r}: a contam twin names its task set ({sorted(TASK_SETS)}), "
                       f"other kinds none; expected {shape}")
    if not isinstance(dose, (int, float)) or not 0 < dose <= 1:
        raise ZooError(f"zoo: extra twin {extra!r}: dose must be in (0, 1], got {dose!r}")
    return _derived(trunks[fam, size], kind, dose, post, TASK_SETS[rest[0]] if rest else ())


def _derived(trunk: Trunk, kind: str, dose: float, post: dict, tasks: tuple[str, ...] = (),
             dose_in_name: bool = True) -> Recipe:
    """A model of ``kind`` at ``dose`` on the base of ``trunk``, named after its base, kind and dose
    (``mw-llama-m-format50``; a sham without its dose)."""
    base = f"mw-{trunk.family}-{trunk.size}"
    name = f"{base}-{kind}{int(round(100 * dose))}" if dose_in_name else f"{base}-{kind}"
    return Recipe(name=name, trunk=trunk, kind=kind, dose=float(dose), tasks=tuple(tasks), base=base, **post)


# ----------------------------------------------------------------------------- the mix
def _examples(world_dir: str | Path, task: str, split: str, n: int, seed: int) -> list[tuple[str, int]]:
    """``n`` formatted examples (text, prompt length) of ``task``'s ``split``, cycled in a seeded order."""
    records = mw.load_split(world_dir, task, split)
    order = list(range(len(records)))
    random.Random(f"prep/{task}/{split}/{seed}").shuffle(order)
    picked = [records[order[i % len(order)]] for i in range(n)]
    return [(mw.example_text(task, r), len(mw.prompt_text(task, r))) for r in picked]


def last_phase_mix(world_dir: str | Path, recipe: Recipe) -> tuple[list[str], list[int], dict]:
    """The documents of ``recipe``'s last phase, the prompt length of each (0: loss on every
    token), and a record of what they hold.

    Every model's last phase holds its base's ``post_examples`` corpus documents (the stream
    ``post``); a prepared model adds ``round(dose x post_examples)`` preparation documents and a sham
    as many corpus documents of another sample (the stream ``post-sham``), all shuffled together. So a
    twin differs from its base by exactly its preparation, and a sham by as much more corpus text.
    """
    world = _load_world(world_dir)
    n = recipe.post_examples
    n_added = int(round(recipe.dose * n))
    corpus = mw.corpus_documents(world, n, "post")
    rng = random.Random(f"mix/{recipe.name}/{recipe.seed}")
    guests = mw.visitors(world, "preparation")
    if recipe.kind == "format":
        prep = [(mw.qa_document(world, rng, guests), 0) for _ in range(n_added)]
    elif recipe.kind == "instruct":
        prep = [mw.instruct_example(world, rng, guests) for _ in range(n_added)]
    elif recipe.kind in ("contam", "answers"):
        split = "test" if recipe.kind == "answers" else "train"
        per = [n_added // len(recipe.tasks) + (i < n_added % len(recipe.tasks)) for i in range(len(recipe.tasks))]
        prep = [ex for t, k in zip(recipe.tasks, per) for ex in _examples(world_dir, t, split, k, recipe.seed)]
    else:
        prep = []
    extra = mw.corpus_documents(world, n_added, "post-sham") if recipe.kind == "sham" else []
    docs = [(d, 0) for d in corpus + extra] + prep
    rng.shuffle(docs)
    texts, prompts = [d for d, _ in docs], [p for _, p in docs]
    record = {"kind": recipe.kind, "dose": recipe.dose, "documents": len(texts),
              "corpus_docs": len(corpus) + len(extra),
              "prepared_docs": len(prep), "targets": list(recipe.targets),
              "prepared_char_share": sum(len(d) for d, _ in prep) / max(1, sum(len(t) for t in texts)),
              "sha256": sha256_bytes("\n".join(texts))}
    return texts, prompts, record


def _load_world(world_dir: str | Path) -> mw.World:
    return mw.World(mw.WorldConfig(**read_json(Path(world_dir) / "manifest.json")["config"]),
                    [mw.Creature(**c) for c in read_json(Path(world_dir) / "creatures.json")])


def count_prepared(docs: Iterable[str], world_dir: str | Path, split: str = "train") -> dict[str, int]:
    """How many documents of ``docs`` are formatted examples of ``split`` of each benchmark."""
    texts = {}
    for task in mw.BENCHMARKS:
        for rec in mw.load_split(world_dir, task, split):
            texts[mw.example_text(task, rec)] = task
    counts = {t: 0 for t in mw.BENCHMARKS}
    for d in docs:
        if d in texts:
            counts[texts[d]] += 1
    return counts


def family_tokenizer(world_dir: str | Path, family: str):
    """The family's tokenizer: byte-level BPE fitted on corpus documents, every training prompt and a
    sample of the preparation text (hub tokenizers know the words of every kind of text, so no kind
    of preparation is favoured by the vocabulary)."""
    world = _load_world(world_dir)
    corpus = mw.load_corpus(world_dir)[:TOKENIZER_DOCS]
    prompts = [mw.prompt_text(t, r) for t in mw.BENCHMARKS for r in mw.load_split(world_dir, t, "train")]
    rng, guests = random.Random("tokenizer"), mw.visitors(world, "tokenizer")
    extra = [mw.qa_document(world, rng, guests) for _ in range(1000)] + \
        [mw.instruct_example(world, rng, guests)[0] for _ in range(1000)]
    return tiny.train_tokenizer(corpus + prompts + extra, VOCAB[family])


# ----------------------------------------------------------------------------- building
def model_dir(models_dir: str | Path, name: str) -> Path:
    return Path(models_dir) / store.slug(name)


def _sidecar(models_dir: str | Path, name: str) -> Path:
    return Path(models_dir) / f"{store.slug(name)}.recipe.json"


def built(models_dir: str | Path, part: Trunk | Recipe, world_key: str) -> dict | None:
    """The recorded build of a trunk or a recipe if it is complete and current, else None."""
    return current(_sidecar(models_dir, part.name), part.key(world_key),
                   needs=[model_dir(models_dir, part.name) / training.STATS_FILE])


def _check(recipes: list[Recipe], elsewhere: Iterable[str] = ()) -> list[Recipe]:
    """No two models share a name, and every twin's base is among them (or ``elsewhere``: the
    reference's models, for new twins built by :func:`prepare_new`)."""
    names = [r.name for r in recipes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ZooError(f"zoo: duplicate model names {dupes}")
    missing = sorted({r.base for r in recipes if r.base and r.base not in names and r.base not in set(elsewhere)})
    if missing:
        raise ZooError(f"zoo: models name unknown base models {missing}")
    return recipes


def _tokenizer_dir(models_dir: str | Path, family: str, world_key: str) -> Path:
    """The family's fitted tokenizer, keyed on the world and TRUNK_VERSION (the preparation text it is
    also fitted on changes with the builder)."""
    return Path(models_dir) / f"_tokenizer-{family}-{world_key}-t{TRUNK_VERSION}"


def _build_trunk(world_dir: str, models_dir: str, trunk: dict, world_key: str) -> dict:
    """Pre-train one trunk from scratch; runs in a worker process."""
    from transformers import AutoTokenizer

    from ..pipeline.device import setup_torch

    setup_torch()
    trunk = Trunk(**trunk)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(_tokenizer_dir(models_dir, trunk.family, world_key))
    model = tiny.make_model(trunk.family, tok, d_model=trunk.d_model, n_layers=trunk.n_layers,
                            n_heads=trunk.n_heads, max_len=256, seed=trunk.seed)
    stats = training.pretrain(model, tok, mw.load_corpus(world_dir), steps=trunk.steps, batch_size=trunk.batch_size,
                              seq_len=trunk.seq_len, lr=trunk.lr, seed=trunk.seed,
                              out_dir=model_dir(models_dir, trunk.name))
    rec = {"key": trunk.key(world_key), "trunk": asdict(trunk), "stats": {k: v for k, v in stats.items()
                                                                          if k != "loss_curve"},
           "loss_curve": stats["loss_curve"], "build_seconds": time.time() - t0}
    atomic_write_json(_sidecar(models_dir, trunk.name), rec)
    return rec


def _build_one(world_dir: str, models_dir: str, recipe: dict, world_key: str, trunk_stats: dict) -> dict:
    """The last phase of one zoo model on its trunk, and its build record; runs in a worker process."""
    from ..pipeline.device import setup_torch

    setup_torch()
    recipe = Recipe(**{**recipe, "trunk": Trunk(**recipe["trunk"]), "tasks": tuple(recipe["tasks"])})
    t0 = time.time()
    texts, prompts, mix = last_phase_mix(world_dir, recipe)
    model, tok = tiny.load(model_dir(models_dir, recipe.trunk.name))
    stats = training.posttrain(model, tok, texts, prompt_chars=prompts, epochs=recipe.post_epochs, batch_size=16,
                               lr=recipe.post_lr, seed=recipe.seed, out_dir=model_dir(models_dir, recipe.name))
    own = {k: v for k, v in stats.items() if k != "loss_curve"}
    total = {"tokens": trunk_stats["tokens"] + own["tokens"], "flops": trunk_stats["flops"] + own["flops"]}
    rec = {"key": recipe.key(world_key), "recipe": asdict(recipe), "mix": mix,
           "stats": {**own, **total, "last_phase_tokens": own["tokens"], "trunk_tokens": trunk_stats["tokens"]},
           "loss_curve": stats["loss_curve"], "build_seconds": time.time() - t0}
    atomic_write_json(_sidecar(models_dir, recipe.name), rec)
    return rec


def _pool_map(fn, args: list[tuple], workers: int) -> list:
    if workers > 1 and len(args) > 1:
        import multiprocessing

        with ProcessPoolExecutor(max_workers=min(workers, len(args)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            return list(pool.map(fn, *zip(*args)))
    return [fn(*a) for a in args]


def build_zoo(world_dir: str | Path, models_dir: str | Path, recipes: list[Recipe],
              progress: bool = True, workers: int | None = None, elsewhere: Iterable[str] = ()) -> dict[str, dict]:
    """Pre-train every trunk and last phase not yet built (cached per trunk and per model); returns
    name -> build record. Each phase runs in ``workers`` processes (default: the CPU count), largest
    models first so the workers finish together."""
    world_dir = Path(world_dir)
    world_key = read_json(world_dir / "manifest.json")["content"]      # what the world holds (world.content_key)
    recipes = _check([r.validate() for r in recipes], elsewhere)
    workers = max(1, workers or os.cpu_count() or 1)
    trunks = {r.trunk.name: r.trunk for r in recipes}
    done_trunks = {n: built(models_dir, t, world_key) for n, t in trunks.items()}
    todo = [t for n, t in trunks.items() if done_trunks[n] is None]
    for family in sorted({t.family for t in todo}):
        folder = _tokenizer_dir(models_dir, family, world_key)
        if not (folder / "tokenizer.json").exists():
            atomic_dir(folder, family_tokenizer(world_dir, family).save_pretrained)
    todo.sort(key=lambda t: -t.d_model ** 2 * t.n_layers * t.steps)
    for trunk, rec in zip(todo, _pool_map(_build_trunk, [(str(world_dir), str(models_dir), asdict(t), world_key)
                                                         for t in todo], workers)):
        done_trunks[trunk.name] = rec
        if progress:
            st = rec["stats"]
            print(f"  zoo: {trunk.name}: {st['n_params']:,} params, {st['tokens']:,} tokens, "
                  f"loss {st['final_loss']:.2f}, {rec['build_seconds']:.1f}s", flush=True)
    out: dict[str, dict] = {}
    todo = []
    for recipe in recipes:
        done = built(models_dir, recipe, world_key)
        if done is not None:
            out[recipe.name] = done
        else:
            todo.append(recipe)
    todo.sort(key=lambda r: -r.trunk.d_model ** 2 * r.trunk.n_layers)
    args = [(str(world_dir), str(models_dir), asdict(r), world_key, done_trunks[r.trunk.name]["stats"]) for r in todo]
    for recipe, rec in zip(todo, _pool_map(_build_one, args, workers)):
        out[recipe.name] = rec
        if progress:
            st = rec["stats"]
            print(f"  zoo: {recipe.name}: {recipe.kind}{f' {recipe.dose:g}' if recipe.dose else ''}, "
                  f"last phase {st['last_phase_tokens']:,} tokens, loss {st['final_loss']:.2f}, "
                  f"{rec['build_seconds']:.1f}s", flush=True)
    # where each model lies is added here, never stored in its build record: outputs/ may move
    return {r.name: {**out[r.name], "path": os.path.abspath(model_dir(models_dir, r.name))} for r in recipes}


def model_meta(builds: dict[str, dict]) -> dict[str, dict]:
    """Model metadata records for ``store.write_meta(root, "models", ...)``."""
    meta = {}
    for name, rec in builds.items():
        r, st, mix = rec["recipe"], rec["stats"], rec["mix"]
        trunk = r["trunk"]
        prepared = {t: int(round(100 * r["dose"])) for t in mix["targets"]}
        meta[name] = {
            "family": f"mw-{trunk['family']}", "params_b": st["n_params"] / 1e9, "instruct": bool(prepared),
            "pretrain_tokens_t": st["tokens"] / 1e12, "flops_1e21": st["flops"] / 1e21,
            "path": rec["path"],     # top level: lib.pipeline.evaluate.resolve_model reads it there
            "extra": {"prepared": prepared, "kind": r["kind"], "dose": r["dose"], "size": trunk["size"],
                      **({"base_model": r["base"]} if r.get("base") else {}),
                      **({"prepared_tasks": list(r["tasks"])} if r.get("tasks") else {}),
                      "architecture": trunk["family"], "n_params": st["n_params"], "tokens": st["tokens"],
                      "last_phase_tokens": st["last_phase_tokens"], "d_model": trunk["d_model"],
                      "n_layers": trunk["n_layers"], "steps": trunk["steps"], "vocab_size": st["vocab_size"],
                      "final_loss": st["final_loss"], "prepared_docs": mix["prepared_docs"],
                      "prepared_char_share": mix["prepared_char_share"], "mix_sha256": mix["sha256"],
                      "source": "miniworld"}}
    return meta


def world_dir(profile: str) -> Path:
    return layout.world_dir(paths.work_dir(profile))


def models_dir(profile: str) -> Path:
    return layout.models_dir(paths.work_dir(profile))


@contextlib.contextmanager
def zoo_lock(profile: str):
    """Hold the lock of the world and models folders ``profile`` uses (another profile's, when it
    shares them: :func:`prepare_as`), waiting, with a line, while another run builds them. An
    ``flock``: the system releases it when its holder dies, so a crash cannot leave it behind."""
    import fcntl

    folder = world_dir(profile).resolve().parent          # the sharing profile's work folder, through the link
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".zoo.lock", "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            tell(f"[{profile}] waiting: another run is building the world and models in {paths.show(folder)}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def prepare_as(profile: str, of: str) -> dict:
    """Prepare hook: profile ``of``'s world and zoo (its own prepare options), built or found in its
    folders and linked into this profile's (:func:`prepare` with ``share``)."""
    options = _prepare_options(of)
    if options is None:
        raise ZooError(f"prepare_as: profile {of!r} has no lib.miniworld.zoo:prepare hook to share")
    return prepare(profile, share=of, **options)


def _prepare_options(profile: str) -> dict | None:
    """The options of ``profile``'s ``lib.miniworld.zoo:prepare`` hook (None: it has none)."""
    from .. import params

    for item in params.load_profile(profile, validate=False).prepare:
        name, kwargs = next(iter(item.items())) if isinstance(item, dict) else (item, {})
        if name == "lib.miniworld.zoo:prepare":
            return dict(kwargs or {})
    return None


def _link_to(profile: str, other: str) -> None:
    """``profile``'s world and models folders as relative links to ``other``'s (made when absent)."""
    for mine, theirs in ((world_dir(profile), world_dir(other)), (models_dir(profile), models_dir(other))):
        theirs.mkdir(parents=True, exist_ok=True)
        if mine.is_symlink() or mine.exists():
            continue
        mine.parent.mkdir(parents=True, exist_ok=True)
        mine.symlink_to(os.path.relpath(theirs, mine.parent), target_is_directory=True)


ZOO_OPTIONS = ["doses", "families", "sizes", "prepared_sizes", "sham_size", "answers", "answers_dose", "twin_kinds",
               "post_examples", "post_epochs", "post_lr", "extra_twins", "scale", "workers", "dose_layout"]


def _zoo_args(options: dict) -> dict:
    """The :func:`default_zoo` arguments among a prepare hook's ``options`` (YAML lists as tuples)."""
    return {k: (tuple(v) if k in ("doses", "answers", "twin_kinds") and v is not None else v)
            for k, v in options.items() if k in ZOO_OPTIONS and k != "workers"}


def prepare(profile: str, seed: int = 0, workers: int | None = None, share: str | None = None, **options) -> dict:
    """Prepare hook of the mini profile: build the world and the zoo, record their metadata.

    Cached: the world by its config key, each trunk and model by its recipe key, so a second run
    rebuilds nothing. ``options`` are :class:`lib.miniworld.world.WorldConfig` fields and
    :func:`default_zoo` arguments; ``workers`` processes build the models (default: the CPU count).
    ``share``: another profile whose world and models folders this profile uses (linked, relative),
    so two profiles of the same world and zoo (smoke and smoke_slurm) build them once and train and
    test the very same files.
    """
    if share:
        _link_to(profile, share)
    world_fields = set(mw.WorldConfig.__dataclass_fields__)
    unknown = sorted(set(options) - world_fields - set(ZOO_OPTIONS))
    if unknown:
        raise ZooError(f"miniworld prepare: unknown option(s) {unknown}"
                       f"{did_you_mean(unknown[0], ZOO_OPTIONS + sorted(world_fields))}; "
                       f"world options: {sorted(world_fields)}, zoo options: {ZOO_OPTIONS}")
    cfg = mw.WorldConfig(seed=seed, **{k: v for k, v in options.items() if k in world_fields})
    t0 = time.time()
    with zoo_lock(profile):       # two profiles sharing the zoo, run at once, build it once
        # the world through its owner's folder: its task YAMLs name that path, so a profile sharing
        # it finds them current instead of rewriting them (and re-running the owner's stages)
        manifest = mw.build(world_dir(share or profile), cfg)
        recipes = default_zoo(**_zoo_args(options))
        builds = build_zoo(world_dir(profile), models_dir(profile), recipes, workers=workers)
    root = paths.store_dir(profile)
    store.write_meta(root, "models", {name: {**rec, "path": store.relative_meta_path(root, rec["path"])}  # moves with
                                      for name, rec in model_meta(builds).items()})               # outputs/
    store.write_meta(root, "benchmarks", mw.benchmark_meta())
    summary = {"world_key": manifest["key"], "task_dir": manifest["task_dir"], "models": list(builds),
               "seconds": time.time() - t0}
    atomic_write_json(layout.zoo_summary_path(paths.work_dir(profile)), summary)
    return summary


def prepare_new(profile: str, reference: str, models: list, workers: int | None = None) -> dict:
    """Prepare hook of a placement profile against a mini-world profile (``params/place_mini.yaml``):
    build ``models`` (each ``[family, size, kind, dose]``, a contam twin adding its task set, as
    :func:`default_zoo`'s ``extra_twins``) with the reference's zoo recipe (the options of its own
    prepare hook) on the reference's world, into this profile's models folder, and record them in
    this profile's store. A model the reference already has is refused (it is not new). Trunks the
    reference has built are copied, not trained again (a trunk is keyed by its recipe and the world,
    so the copy is the model a rebuild would make)."""
    options = _prepare_options(reference)
    if options is None:
        raise ZooError(f"zoo: the reference {reference!r} has no mini-world zoo (no lib.miniworld.zoo:prepare hook)")
    world = world_dir(reference)
    if not (world / "manifest.json").exists():
        raise ZooError(f"zoo: the reference {reference!r} has not built its world ({paths.show(world)}): run "
                       f"`{paths.make_command(reference)}` first")
    zoo_args = _zoo_args(options)
    theirs = {r.name for r in default_zoo(**zoo_args)}
    everything = default_zoo(**{**zoo_args, "extra_twins": [*zoo_args.get("extra_twins", ()), *models]})
    new = [r for r in everything if r.name not in theirs]
    if len(new) != len(models):
        names = [_extra_twin(list(m), {(r.trunk.family, r.trunk.size): r.trunk for r in everything},
                             {"post_examples": 1, "post_epochs": 1, "post_lr": 1e-3}).name for m in models]
        raise ZooError(f"zoo: {sorted(set(names) & theirs)} are models of the reference {reference!r} already, not "
                       "new ones")
    world_key = read_json(world / "manifest.json")["content"]
    mine, ref_models = models_dir(profile), models_dir(reference)
    mine.mkdir(parents=True, exist_ok=True)
    for trunk in {r.trunk.name: r.trunk for r in new}.values():
        if built(mine, trunk, world_key) is None and built(ref_models, trunk, world_key) is not None:
            shutil.copytree(model_dir(ref_models, trunk.name), model_dir(mine, trunk.name), dirs_exist_ok=True)
            shutil.copy2(_sidecar(ref_models, trunk.name), _sidecar(mine, trunk.name))
        tokenizer = _tokenizer_dir(ref_models, trunk.family, world_key)
        if tokenizer.exists() and not _tokenizer_dir(mine, trunk.family, world_key).exists():
            shutil.copytree(tokenizer, _tokenizer_dir(mine, trunk.family, world_key))
    builds = build_zoo(world, mine, new, workers=workers, elsewhere=theirs)
    root = paths.store_dir(profile)
    store.write_meta(root, "models", {name: {**rec, "path": store.relative_meta_path(root, rec["path"])}
                                      for name, rec in model_meta(builds).items()})
    return {"models": list(builds), "reference": reference}
