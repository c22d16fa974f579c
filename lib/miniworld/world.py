"""A generated world: a knowledge base, a small language over it, a pre-training corpus, six
benchmarks in the formats of the paper's, and held-out perplexity corpora.

Everything is a deterministic function of one seed (``random.Random`` seeded with strings, which
does not depend on ``PYTHONHASHSEED``), so two builds with the same seed are byte-identical.

The world
---------
``n_creatures`` creatures with made-up names (``bako``, ``zirun`` ...), each living in a habitat,
eating a food and having a colour. Creatures are mentioned with Zipf-distributed frequency, so a
model with more capacity or more pre-training tokens knows the facts of more of them. The corpus
has five genres: encyclopedic fact documents, arithmetic stories, meal reviews (sentiment words),
daily routines (event scripts whose order is each creature's own habit) and short sentences. No
corpus document uses the benchmark format ("Question: ... Answer:"): that format is what test-task
*preparation* adds (see ``lib.miniworld.zoo``), and what fine-tuning on the training split teaches
everyone.

Benchmarks (name: paper analogue, format, metric, category)
-----------------------------------------------------------
- ``mw_facts``: arc/openbookqa, 4-way multiple choice on knowledge, acc_norm, Question Answering
- ``mw_arith``: gsm8k, generative word problems, exact_match, Math
- ``mw_reading``: boolq-style reading, 4-way question on a passage about an unseen creature, acc,
  Question Answering
- ``mw_sentiment``: sst2, positive/negative, acc, Language Understanding
- ``mw_grammar``: cola as minimal pairs (as BLiMP does): which of two sentences is correct, acc,
  Language Understanding
- ``mw_scripts``: hellaswag, 4-way continuation of a creature's routine, acc_norm, Commonsense Reasoning

Each benchmark has train / validation / test splits drawn from disjoint sets of items (the unit of
an item is its prompt and choices, and for ``mw_facts`` the (creature, attribute) pair, so the
answer to a test question is never given in a training question).

Design rule: every benchmark must be learnable by the zoo's larger models under the mini
profile's fine-tuning recipe, as the paper's benchmarks are for its models; a benchmark at chance
for every model carries no ranking (how earlier versions fell short: ``docs/design.md``).
Perplexity corpora ``mw_wiki`` and ``mw_stories`` are generated from a separate random stream
(never part of pre-training), with a training part for train-before-test.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..metadata import GEN, MC, PERPLEXITY, PPL, Benchmark
from ..pipeline.localtasks import write_task
from ..util import atomic_write_json, atomic_write_text, current, sha256_bytes, sha256_file

WORLD_VERSION = 3

HABITATS = ["forest", "desert", "river", "mountain", "cave", "meadow", "lake", "island"]
FOODS = ["berries", "fish", "seeds", "leaves", "honey", "insects", "roots", "mushrooms"]
COLORS = ["red", "blue", "green", "yellow", "white", "black", "brown", "gray"]
POSITIVE = ["tasty", "fresh", "sweet", "lovely", "good", "great"]
NEGATIVE = ["bitter", "stale", "awful", "bad", "sour", "rotten"]
MEAL_VERBS = ["tasted", "ate", "tried"]

# Daily routines: the first event opens the routine; every creature does the other four in its own
# order (its habit). "{food}" and "{habitat}" are the creature's own.
ROUTINES = {
    "morning": ["wakes up", "drinks some water", "walks to the {habitat}", "looks for {food}",
                "eats the {food}"],
    "evening": ["comes back home", "cleans its fur", "sits by the fire", "sings a song",
                "falls asleep"],
    "building": ["finds a long stick", "carries the stick home", "digs a small hole",
                 "builds a nest", "rests in the nest"],
    "trip": ["packs a bag", "says goodbye", "crosses the bridge", "climbs the hill",
             "waves from the top"],
    "rain": ["sees dark clouds", "runs under a tree", "waits for the rain to stop",
             "shakes off the water", "goes back to the {habitat}"],
    "market": ["counts its coins", "goes to the market", "buys some {food}", "carries the bag",
               "shares the {food} with a friend"],
}
ROUTINE_OPENINGS = {"morning": "in the morning", "evening": "in the evening",
                    "building": "one day", "trip": "on a sunny day", "rain": "on a rainy day",
                    "market": "on market day"}

BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark(name="mw_facts", kind=MC, metric="acc_norm", category="Question Answering", analogue="arc_easy",
              source="miniworld", chance=0.25),
    Benchmark(name="mw_arith", kind=GEN, metric="exact_match", filter="remove_whitespace", category="Math",
              analogue="gsm8k", source="miniworld", chance=0.0),
    Benchmark(name="mw_reading", kind=MC, metric="acc", category="Question Answering", analogue="boolq",
              source="miniworld", chance=0.25),
    Benchmark(name="mw_sentiment", kind=MC, metric="acc", category="Language Understanding", analogue="sst2",
              source="miniworld", chance=0.5),
    Benchmark(name="mw_grammar", kind=MC, metric="acc", category="Language Understanding", analogue="cola",
              source="miniworld", chance=0.5),
    Benchmark(name="mw_scripts", kind=MC, metric="acc_norm", category="Commonsense Reasoning",
              analogue="hellaswag", source="miniworld", chance=0.25),
)}
CORPORA: dict[str, Benchmark] = {n: Benchmark(name=n, kind=PPL, metric="bits_per_byte", category=PERPLEXITY,
                                              source="miniworld") for n in ("mw_wiki", "mw_stories")}
SPLITS = ("train", "validation", "test")


class WorldError(ValueError):
    """Invalid world configuration (the message names the key)."""


@dataclass(frozen=True)
class WorldConfig:
    """Sizes of the world; the defaults are what the mini profile uses."""
    seed: int = 0
    n_creatures: int = 120
    n_corpus_docs: int = 24000
    train: int = 320          # items per benchmark split
    validation: int = 80
    test: int = 160
    corpus_train: int = 200   # documents per perplexity-corpus split
    corpus_validation: int = 40
    corpus_test: int = 60
    zipf: float = 1.0         # creature mention frequency ~ 1 / rank**zipf

    def validate(self) -> WorldConfig:
        for key, value in asdict(self).items():
            if key == "zipf":
                if not (isinstance(value, (int, float)) and value >= 0):
                    raise WorldError(f"world config: {key} must be a number >= 0, got {value!r}")
            elif not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "seed" else 1):
                raise WorldError(f"world config: {key} must be a positive integer, got {value!r}")
        if self.n_creatures < 8:
            raise WorldError(f"world config: n_creatures must be >= 8, got {self.n_creatures}")
        return self

    def key(self) -> str:
        payload = json.dumps({"version": WORLD_VERSION, **asdict(self)}, sort_keys=True)
        return sha256_bytes(payload)[:16]


@dataclass(frozen=True)
class Creature:
    name: str
    habitat: str
    food: str
    color: str
    weight: float   # relative mention frequency in the corpus
    habits: dict = field(default_factory=dict)   # routine -> its own order of the events after the first


@dataclass
class World:
    config: WorldConfig
    creatures: list[Creature]
    benchmarks: dict[str, dict[str, list[dict]]] = field(default_factory=dict)   # name -> split -> records
    corpora: dict[str, dict[str, list[dict]]] = field(default_factory=dict)      # name -> split -> [{"text"}]

    def corpus(self, n_docs: int | None = None, stream: str = "pretrain") -> list[str]:
        """The pre-training corpus: ``n_docs`` documents (default ``config.n_corpus_docs``)."""
        return corpus_documents(self, n_docs or self.config.n_corpus_docs, stream)


def _rng(seed: int, *parts) -> random.Random:
    return random.Random("/".join(["miniworld", str(seed), *map(str, parts)]))


# ----------------------------------------------------------------------------- knowledge base
def make_names(n: int, rng: random.Random) -> list[str]:
    cons, vows, ends = "bdfgklmnprstvz", "aeiou", ["", "", "n", "r", "k", "s"]
    names: list[str] = []
    seen = set()
    while len(names) < n:
        name = "".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.choice([2, 2, 3]))) + rng.choice(ends)
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def make_creatures(cfg: WorldConfig) -> list[Creature]:
    rng = _rng(cfg.seed, "kb")
    names = make_names(cfg.n_creatures, rng)
    weights = [1.0 / (i + 1) ** cfg.zipf for i in range(cfg.n_creatures)]
    total = sum(weights)
    out = []
    for name, w in zip(names, weights):
        attrs = rng.choice(HABITATS), rng.choice(FOODS), rng.choice(COLORS)
        habits = {r: rng.sample(range(1, len(ev)), len(ev) - 1) for r, ev in ROUTINES.items()}
        out.append(Creature(name, *attrs, w / total, habits))
    return out


# ----------------------------------------------------------------------------- the language
FACT_TEMPLATES = {
    "habitat": ["the {name} lives in the {habitat} .", "you can find the {name} in the {habitat} .",
                "the home of the {name} is the {habitat} ."],
    "food": ["the {name} eats {food} .", "the {name} likes to eat {food} .",
             "{food} is the favourite food of the {name} ."],
    "color": ["the {name} is {color} .", "the fur of the {name} is {color} .",
              "a {color} animal , the {name} is easy to see ."],
}


def fact_sentence(c: Creature, attr: str, rng: random.Random) -> str:
    return rng.choice(FACT_TEMPLATES[attr]).format(**asdict(c))


def routine_events(c: Creature, routine: str) -> list[str]:
    """The creature's own version of a routine: the first event, then the others in its order."""
    events = [e.format(food=c.food, habitat=c.habitat) for e in ROUTINES[routine]]
    return [events[0]] + [events[i] for i in c.habits[routine]]


def routine_text(c: Creature, routine: str, upto: int | None = None) -> str:
    events = routine_events(c, routine)[:upto]
    parts = [f"{ROUTINE_OPENINGS[routine]} the {c.name} {events[0]} ."]
    parts += [f"then it {e} ." for e in events[1:]]
    return " ".join(parts)


def review_sentence(c: Creature, positive: bool, rng: random.Random) -> tuple[str, str]:
    adjs = rng.sample(POSITIVE if positive else NEGATIVE, 2)
    return (f"the {c.name} {rng.choice(MEAL_VERBS)} the {rng.choice(FOODS)} . "
            f"it was {adjs[0]} and {adjs[1]} ."), ("happy" if positive else "sad")


def arith_problem(c: Creature, rng: random.Random) -> tuple[str, str, int]:
    """(setup sentence, question, answer): one-digit addition or subtraction about the creature."""
    food = c.food
    if rng.random() < 0.5:
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        setup, ans = f"the {c.name} has {a} {food} and finds {b} more .", a + b
    else:
        a = rng.randint(2, 9)
        b = rng.randint(1, a - 1)
        setup, ans = f"the {c.name} has {a} {food} and gives {b} away .", a - b
    return setup, f"how many {food} does the {c.name} have now ?", ans


def _pick(creatures: list[Creature], rng: random.Random) -> Creature:
    return rng.choices(creatures, weights=[c.weight for c in creatures])[0]


def corpus_document(world: World, rng: random.Random) -> str:
    """One pre-training document of a random genre (never in the benchmark format)."""
    cs = world.creatures
    genre = rng.choices(["facts", "arith", "review", "routine", "sentences"], weights=[4, 2, 2, 2, 1])[0]
    if genre == "facts":
        c = _pick(cs, rng)
        attrs = rng.sample(list(FACT_TEMPLATES), rng.randint(2, 3))
        return " ".join(fact_sentence(c, a, rng) for a in attrs)
    if genre == "arith":
        out = []
        for _ in range(rng.randint(1, 2)):
            c = _pick(cs, rng)
            setup, _, ans = arith_problem(c, rng)
            out.append(f"{setup} now it has {ans} {c.food} .")
        if rng.random() < 0.5:
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            out.append(f"{a} plus {b} is {a + b} ." if rng.random() < 0.5 or a <= b
                       else f"{a} minus {b} is {a - b} .")
        return " ".join(out)
    if genre == "review":
        c = _pick(cs, rng)
        positive = rng.random() < 0.5
        text, mood = review_sentence(c, positive, rng)
        tail = rng.choice([f" the {c.name} was {mood} .",
                           f" it was a {'positive' if positive else 'negative'} meal .", ""])
        return text + tail
    if genre == "routine":
        c = _pick(cs, rng)
        return routine_text(c, rng.choice(list(ROUTINES)))
    c1, c2 = _pick(cs, rng), _pick(cs, rng)
    first = fact_sentence(c1, rng.choice(list(FACT_TEMPLATES)), rng)
    return f"{first} {fact_sentence(c2, rng.choice(list(FACT_TEMPLATES)), rng)}"


def corpus_documents(world: World, n_docs: int, stream: str = "pretrain") -> list[str]:
    rng = _rng(world.config.seed, "corpus", stream)
    return [corpus_document(world, rng) for _ in range(n_docs)]


# ----------------------------------------------------------------------------- benchmarks
def _facts_items(world: World, rng: random.Random) -> list[tuple[str, dict]]:
    questions = {"habitat": ("where does the {name} live ?", HABITATS, "the {name} lives in the {v}"),
                 "food": ("what does the {name} eat ?", FOODS, "the {name} eats {v}"),
                 "color": ("what color is the {name} ?", COLORS, "the {name} is {v}")}
    items = []
    for c in world.creatures:
        for attr, (q, values, fmt) in questions.items():
            true = getattr(c, attr)
            options = [true] + rng.sample([v for v in values if v != true], 3)
            rng.shuffle(options)
            rec = {"query": f"Question: {q.format(name=c.name)}\nAnswer:",
                   "choices": [fmt.format(name=c.name, v=v) for v in options], "label": options.index(true)}
            items.append((f"{c.name}/{attr}", rec))
    return items


def _arith_items(world: World, rng: random.Random, n: int) -> list[tuple[str, dict]]:
    items = []
    for _ in range(n):
        c = rng.choice(world.creatures)
        setup, question, ans = arith_problem(c, rng)
        items.append((setup + question, {"question": f"Question: {setup} {question}\nAnswer:", "answer": str(ans)}))
    return items


def _reading_items(world: World, rng: random.Random, n: int) -> list[tuple[str, dict]]:
    """A passage about a creature the corpus never mentions, and a question answered in it."""
    known = {c.name for c in world.creatures}
    visitors = [v for v in make_names(len(known) + 200, _rng(world.config.seed, "visitors")) if v not in known]
    questions = {"habitat": ("where does the {v} live ?", HABITATS, "in the {x}"),
                 "food": ("what does the {v} eat ?", FOODS, "{x}"),
                 "color": ("what color is the {v} ?", COLORS, "{x}")}
    items = []
    for _ in range(n):
        v = rng.choice(visitors)
        attrs = {"habitat": rng.choice(HABITATS), "food": rng.choice(FOODS), "color": rng.choice(COLORS)}
        clauses = {"habitat": f"lives in the {attrs['habitat']}", "food": f"eats {attrs['food']}",
                   "color": f"is {attrs['color']}"}
        order = rng.sample(list(clauses), 3)
        passage = f"the {v} {clauses[order[0]]} , {clauses[order[1]]} and {clauses[order[2]]} ."
        attr = rng.choice(order)
        q, values, fmt = questions[attr]
        options = [attrs[attr]] + rng.sample([x for x in values if x != attrs[attr]], 3)
        rng.shuffle(options)
        rec = {"query": f"{passage}\nQuestion: {q.format(v=v)}\nAnswer:",
               "choices": [fmt.format(x=x) for x in options], "label": options.index(attrs[attr])}
        items.append((rec["query"], rec))
    return items


def _sentiment_items(world: World, rng: random.Random, n: int) -> list[tuple[str, dict]]:
    items = []
    for _ in range(n):
        c = rng.choice(world.creatures)
        positive = rng.random() < 0.5
        text, _ = review_sentence(c, positive, rng)
        rec = {"query": f"{text}\nQuestion: is this positive or negative?\nAnswer:",
               "choices": ["negative", "positive"], "label": int(positive)}
        items.append((rec["query"], rec))
    return items


def _corrupt(sentence: str, rng: random.Random) -> str:
    """An ungrammatical variant: wrong agreement, swapped neighbours, or a dropped article."""
    words = sentence.split()
    kind = rng.choice(["agree", "swap", "drop"])
    if kind == "agree":
        for i, w in enumerate(words):
            if w in ("lives", "eats", "likes", "is"):
                words[i] = {"lives": "live", "eats": "eat", "likes": "like", "is": "are"}[w]
                return " ".join(words)
    if kind == "drop" and "the" in words:
        i = words.index("the")
        return " ".join(words[:i] + words[i + 1:])
    body = words[:-1]
    i = rng.randrange(len(body) - 1)
    body[i], body[i + 1] = body[i + 1], body[i]
    return " ".join(body + words[-1:])


def _grammar_items(world: World, rng: random.Random, n: int) -> list[tuple[str, dict]]:
    """Minimal pairs: a correct sentence of the language and a corrupted copy; which is correct?"""
    items = []
    for _ in range(n):
        c = rng.choice(world.creatures)
        good = fact_sentence(c, rng.choice(list(FACT_TEMPLATES)), rng)
        bad = _corrupt(good, rng)
        if bad == good:
            continue
        label = int(rng.random() < 0.5)
        choices = [bad, good] if label else [good, bad]
        rec = {"query": "Question: which sentence is correct?\nAnswer:", "choices": choices, "label": label}
        items.append((f"{good}|{bad}", rec))
    return items


def _scripts_items(world: World, rng: random.Random, n: int) -> list[tuple[str, dict]]:
    items = []
    for _ in range(n):
        c = rng.choice(world.creatures)
        routine = rng.choice(list(ROUTINES))
        k = rng.randint(1, 2)                          # events shown; the next one is the answer
        events = routine_events(c, routine)
        true = f"{events[k]} ."
        # distractors: the routine's events still to come (only the creature's habit orders them),
        # topped up from another routine
        later = [f"{e} ." for e in events[k + 1:]]
        others = sorted({f"{e} ." for r in ROUTINES if r != routine for e in routine_events(c, r)[1:]})
        options = [true] + later[:3] + rng.sample(others, 3 - len(later[:3]))
        rng.shuffle(options)
        rec = {"query": routine_text(c, routine, upto=k) + " then it", "choices": options,
               "label": options.index(true)}
        items.append((rec["query"], rec))
    return items


def _split(items: list[tuple[str, dict]], sizes: dict[str, int], name: str, rng: random.Random,
           balance: bool = False) -> dict[str, list[dict]]:
    """Deduplicate by item key, shuffle, and cut disjoint train/validation/test parts.

    ``balance``: classification tasks get (nearly) equal label counts in every split, so a model
    that always answers the same class scores chance, not the majority share.
    """
    unique: dict[str, dict] = {}
    for key, rec in items:
        unique.setdefault(key, rec)
    groups: dict[int, list[str]] = {}
    for key in sorted(unique):
        groups.setdefault(int(unique[key]["label"]) if balance else 0, []).append(key)
    for keys in groups.values():
        rng.shuffle(keys)
    labels = sorted(groups)
    need = sum(sizes.values())
    have = min(len(k) for k in groups.values()) * len(labels)
    if have < need:
        # shrink proportionally but keep every split non-empty
        scale = have / need
        sizes = {s: max(len(labels), int(v * scale)) for s, v in sizes.items()}
    out, start = {}, {lab: 0 for lab in labels}
    for split in SPLITS:
        part = []
        for i, lab in enumerate(labels):
            n = sizes[split] // len(labels) + (1 if i < sizes[split] % len(labels) else 0)
            part += groups[lab][start[lab]:start[lab] + n]
            start[lab] += n
        if not part:
            raise WorldError(f"benchmark {name}: not enough distinct items for split {split!r}")
        rng.shuffle(part)
        out[split] = [unique[k] for k in part]
    return out


def make_benchmarks(world: World) -> dict[str, dict[str, list[dict]]]:
    cfg = world.config
    sizes = {"train": cfg.train, "validation": cfg.validation, "test": cfg.test}
    want = int(1.6 * sum(sizes.values())) + 50         # draws; duplicates are removed before the split
    builders = {
        "mw_facts": lambda r: _facts_items(world, r),
        "mw_arith": lambda r: _arith_items(world, r, want),
        "mw_reading": lambda r: _reading_items(world, r, want),
        "mw_sentiment": lambda r: _sentiment_items(world, r, want),
        "mw_grammar": lambda r: _grammar_items(world, r, want),
        "mw_scripts": lambda r: _scripts_items(world, r, want),
    }
    out = {}
    for name, build in builders.items():
        # items are keyed by prompt text; mw_facts by its (creature, attribute) pair, so no test
        # answer is ever given in a training question
        balance = name in ("mw_sentiment", "mw_grammar")
        out[name] = _split(build(_rng(cfg.seed, name, "items")), sizes, name, _rng(cfg.seed, name, "split"),
                           balance)
    return out


def make_corpora(world: World) -> dict[str, dict[str, list[dict]]]:
    """Held-out perplexity corpora (own random streams, never part of pre-training)."""
    cfg = world.config
    sizes = {"train": cfg.corpus_train, "validation": cfg.corpus_validation, "test": cfg.corpus_test}
    out = {}
    rng = _rng(cfg.seed, "mw_wiki")
    docs = []
    for c in world.creatures * math.ceil(sum(sizes.values()) / len(world.creatures)):
        sents = [f"the {c.name} is a {c.color} animal from the {c.habitat} .",
                 f"it eats {c.food} .", routine_text(c, rng.choice(list(ROUTINES)), upto=rng.randint(2, 5))]
        docs.append(" ".join(sents))
    rng.shuffle(docs)
    out["mw_wiki"] = _cut(docs, sizes)
    rng = _rng(cfg.seed, "mw_stories")
    docs = []
    for _ in range(sum(sizes.values())):
        c = _pick(world.creatures, rng)
        setup, _, ans = arith_problem(c, rng)
        text, mood = review_sentence(c, rng.random() < 0.5, rng)
        docs.append(f"{routine_text(c, rng.choice(list(ROUTINES)))} {setup} now it has {ans} {c.food} . "
                    f"{text} the {c.name} was {mood} .")
    out["mw_stories"] = _cut(docs, sizes)
    return out


def _cut(docs: list[str], sizes: dict[str, int]) -> dict[str, list[dict]]:
    out, start = {}, 0
    for split in SPLITS:
        out[split] = [{"text": t} for t in docs[start:start + sizes[split]]]
        start += sizes[split]
    return out


def generate(config: WorldConfig | None = None) -> World:
    """The world of ``config`` (in memory; nothing is written)."""
    cfg = (config or WorldConfig()).validate()
    world = World(cfg, make_creatures(cfg))
    world.benchmarks = make_benchmarks(world)
    world.corpora = make_corpora(world)
    return world


# ----------------------------------------------------------------------------- formats
def example_text(benchmark: str, record: dict) -> str:
    """A record as the model sees it with its answer (prompt, a space, the gold answer).

    This is the text of a "prepared" pre-training example and of a fine-tuning example; it equals
    lm-eval's ``doc_to_text + target_delimiter + target`` for the task written by :func:`build`.
    """
    if BENCHMARKS[benchmark].kind == MC:
        return f"{record['query']} {record['choices'][int(record['label'])]}"
    return f"{record['question']} {record['answer']}"


def item_key(benchmark: str, record: dict) -> str:
    """What makes an item distinct: its prompt, and for multiple choice also its choices."""
    if BENCHMARKS[benchmark].kind == MC:
        return record["query"] + "\x1f" + "\x1f".join(record["choices"])
    return record["question"]


def prompt_text(benchmark: str, record: dict) -> str:
    return record["query"] if BENCHMARKS[benchmark].kind == MC else record["question"]


def benchmark_meta() -> dict[str, dict]:
    """Benchmark metadata records for ``lib.store.write_meta(store, "benchmarks", ...)``."""
    return {name: b.record() for name, b in {**BENCHMARKS, **CORPORA}.items()}


# ----------------------------------------------------------------------------- on disk
def build(out_dir: str | Path, config: WorldConfig | None = None, force: bool = False) -> dict:
    """Write the world under ``out_dir`` (cached: an unchanged config rebuilds nothing).

    Layout: ``tasks/<name>/{train,validation,test}.jsonl + <name>.yaml`` (local lm-eval tasks, one
    folder to hand to ``TaskManager(include_path=...)``), ``corpus.txt`` (pre-training documents,
    one per line), ``creatures.json`` (the knowledge base) and ``manifest.json`` (config, counts,
    sha256 of every file) written last, so its presence means the build completed.
    """
    cfg = (config or WorldConfig()).validate()
    out = Path(out_dir)
    manifest_path = out / "manifest.json"
    if not force:
        manifest = current(manifest_path, cfg.key())
        if manifest is not None and all((out / f).exists() for f in manifest.get("files", {})):
            return manifest
    world = generate(cfg)
    tasks = out / "tasks"
    files: dict[str, str] = {}
    for name, splits in world.benchmarks.items():
        bench = BENCHMARKS[name]
        yaml_path = write_task(tasks, name, bench.kind, splits, metrics=[bench.metric], tags=["miniworld"],
                               max_gen_toks=4)
        files[str(yaml_path.relative_to(out))] = ""
        for split in splits:
            files[f"tasks/{name}/{split}.jsonl"] = ""
    for name, splits in world.corpora.items():
        yaml_path = write_task(tasks, name, "loglikelihood_rolling", splits, tags=["miniworld_corpus"],
                               metrics=["word_perplexity", "byte_perplexity", "bits_per_byte"])
        files[str(yaml_path.relative_to(out))] = ""
        for split in splits:
            files[f"tasks/{name}/{split}.jsonl"] = ""
    atomic_write_text(out / "corpus.txt", "\n".join(world.corpus()) + "\n")
    atomic_write_json(out / "creatures.json", [asdict(c) for c in world.creatures])
    files["corpus.txt"] = ""
    files["creatures.json"] = ""
    files = {f: sha256_file(out / f) for f in sorted(files)}
    manifest = {"key": cfg.key(), "version": WORLD_VERSION, "config": asdict(cfg), "files": files,
                "benchmarks": {n: {s: len(r) for s, r in sp.items()} for n, sp in world.benchmarks.items()},
                "corpora": {n: {s: len(r) for s, r in sp.items()} for n, sp in world.corpora.items()},
                "corpus_docs": cfg.n_corpus_docs, "task_dir": str(tasks.resolve())}
    atomic_write_json(manifest_path, manifest)
    return manifest


def load_split(world_dir: str | Path, name: str, split: str) -> list[dict]:
    """Records of one split of a built benchmark or corpus."""
    path = Path(world_dir) / "tasks" / name / f"{split}.jsonl"
    if not path.exists():
        known = sorted(p.name for p in (Path(world_dir) / "tasks").glob("*") if p.is_dir())
        raise WorldError(f"no split {split!r} of {name!r} under {world_dir} (built: {known})")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def load_corpus(world_dir: str | Path) -> list[str]:
    path = Path(world_dir) / "corpus.txt"
    if not path.exists():
        raise WorldError(f"{path} does not exist: build the world first (lib.miniworld.world.build)")
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line]
