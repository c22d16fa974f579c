"""A generated world: a knowledge base, a small language over it, a pre-training corpus, six
benchmarks in the formats of the paper's, and held-out perplexity corpora.

Everything is a deterministic function of one seed (``random.Random`` seeded with strings, which
does not depend on ``PYTHONHASHSEED``), so two builds with the same seed are byte-identical.

The world
---------
``n_creatures`` creatures with made-up names (``bako``, ``zirun`` ...), each with seven
attributes (habitat, food, colour, sound, pattern, tree, drink). Creatures are mentioned with
Zipf-distributed frequency, so a model with more parameters or more pre-training tokens knows the
facts of more of them: the one common capability every benchmark draws on, as real benchmarks draw
on what pre-training taught. The corpus has four genres: encyclopedic fact documents, meals (a
creature is happy after eating its own food and sad after any other), daily routines (events that
involve the creature's habitat and food, in a fixed order) and pairs of facts about two creatures.
No corpus document uses a benchmark's format ("Question: ... Answer:", "Story: ...", listed
options): that format is what test-task *preparation* adds (``lib.miniworld.zoo``), and what
fine-tuning on the training split teaches everyone.

Benchmarks (name: paper analogue, format, metric, category, chance)
-------------------------------------------------------------------
- ``mw_facts``: arc_easy; a question about one attribute of a creature, 4-way multiple choice
  between full statements ("the bako lives in the desert"); acc_norm; Question Answering; 1/4
- ``mw_recall``: nq_open; the same question answered by generating the bare value (4 tokens at
  most, stopping at a newline or " ."); exact_match; Question Answering; 0
- ``mw_cloze``: lambada; a fact sentence of the corpus's own wording cut before its value, generate
  the value; exact_match; Language Understanding; 0
- ``mw_quiz``: commonsense_qa; the question with its four options listed in the prompt
  ("(desert, lake, cave or forest)"), answered by one of them; acc; Commonsense Reasoning; 1/4.
  At chance for every model of the mini zoo even after fine-tuning, so the mini profile leaves it
  out (the smoke profile runs it as its plain-``acc`` multiple-choice task)
- ``mw_reading``: boolq-style reading: a passage about a creature the corpus never mentions and a
  4-way question answered in it (the only task that needs no world knowledge, only the language);
  acc; Question Answering; 1/4
- ``mw_scripts``: hellaswag; "Story: " and a routine's first events, the next event among four
  that differ in the habitat or food it involves (never one the context already gave away);
  acc_norm; Commonsense Reasoning; 1/4

Every benchmark has train / validation / test splits drawn from disjoint sets of items; an item's
unit is what would give its answer away (a (creature, attribute) pair, a (creature, routine) pair
for ``mw_scripts``), so no test answer is given in a training item. Test splits hold 500 items
(``mw_scripts`` 428: one item per creature and routine), so a score's standard error is about
0.02. Perplexity corpora ``mw_wiki`` and ``mw_stories`` are generated from separate random streams
(never part of pre-training) and deduplicated, with a training part for train-before-test.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..metadata import GEN, MC, PERPLEXITY, PPL, Benchmark
from ..pipeline.localtasks import write_task
from ..util import atomic_write_json, atomic_write_text, current, sha256_bytes, sha256_file

WORLD_VERSION = 5

HABITATS = ["forest", "desert", "river", "mountain", "cave", "meadow", "lake", "island"]
FOODS = ["berries", "fish", "seeds", "leaves", "honey", "insects", "roots", "mushrooms"]
COLORS = ["red", "blue", "green", "yellow", "white", "black", "brown", "gray"]
SOUNDS = ["hums", "barks", "chirps", "hisses", "growls", "squeaks", "whistles", "clicks"]
PATTERNS = ["spots", "stripes", "dots", "rings", "scales", "patches", "lines", "stars"]
TREES = ["pine", "birch", "maple", "willow", "palm", "cedar", "beech", "fir"]
DRINKS = ["water", "milk", "tea", "juice", "nectar", "dew", "soup", "sap"]
VALUES = {"habitat": HABITATS, "food": FOODS, "color": COLORS, "sound": SOUNDS, "pattern": PATTERNS,
          "tree": TREES, "drink": DRINKS}
GOOD = ["tasty", "fresh", "sweet", "lovely", "good", "great"]
BAD = ["bitter", "stale", "awful", "bad", "sour", "rotten"]

# Daily routines: a fixed order of events for every creature; "{food}" and "{habitat}" are the
# creature's own, so continuing a routine means knowing the creature.
ROUTINES = {
    "morning": ["wakes up", "drinks some water", "walks to the {habitat}", "looks for {food}", "eats the {food}"],
    "evening": ["comes back from the {habitat}", "cleans its fur", "thinks about {food}", "sings a song",
                "falls asleep"],
    "market": ["counts its coins", "goes to the market", "buys some {food}", "carries the bag to the {habitat}",
               "shares the {food} with a friend"],
    "trip": ["packs a bag", "says goodbye", "crosses the bridge", "reaches the {habitat}", "finds some {food}"],
    "rain": ["sees dark clouds", "runs under a tree", "waits for the rain to stop", "shakes off the water",
             "goes back to the {habitat}"],
    "feast": ["invites a friend", "cooks the {food}", "sets the table", "eats the {food} slowly",
              "naps in the {habitat}"],
}
OPENINGS = {"morning": "in the morning", "evening": "in the evening", "market": "on market day",
            "trip": "on a sunny day", "rain": "on a rainy day", "feast": "on a holiday"}

BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark(name="mw_facts", kind=MC, metric="acc_norm", category="Question Answering", analogue="arc_easy",
              source="miniworld", chance=0.25),
    Benchmark(name="mw_recall", kind=GEN, metric="exact_match", filter="remove_whitespace",
              category="Question Answering", analogue="nq_open", source="miniworld", chance=0.0),
    Benchmark(name="mw_cloze", kind=GEN, metric="exact_match", filter="remove_whitespace",
              category="Language Understanding", analogue="lambada", source="miniworld", chance=0.0),
    Benchmark(name="mw_quiz", kind=MC, metric="acc", category="Commonsense Reasoning", analogue="commonsense_qa",
              source="miniworld", chance=0.25),
    Benchmark(name="mw_reading", kind=MC, metric="acc", category="Question Answering", analogue="boolq",
              source="miniworld", chance=0.25),
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
    n_corpus_docs: int = 30000
    train: int = 250          # items per benchmark split
    validation: int = 90
    test: int = 500           # several hundred: a score's standard error of about 0.02
    reading_train: int = 500  # mw_reading draws new passages without end: more to learn its format from
    corpus_train: int = 200   # documents per perplexity-corpus split
    corpus_validation: int = 40
    corpus_test: int = 100
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
        """What determines the built world: this config and the generator's source (an edited
        generator rebuilds the world, and with it the zoo)."""
        payload = json.dumps({"version": WORLD_VERSION, "source": sha256_file(__file__), **asdict(self)},
                             sort_keys=True)
        return sha256_bytes(payload)[:16]


@dataclass(frozen=True)
class Creature:
    name: str
    habitat: str
    food: str
    color: str
    sound: str
    pattern: str
    tree: str
    drink: str
    weight: float   # relative mention frequency in the corpus
    rank: int = 0   # 0 = the most mentioned


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
    return [Creature(name, *(rng.choice(VALUES[a]) for a in VALUES), w / total, rank)
            for rank, (name, w) in enumerate(zip(names, weights))]


# ----------------------------------------------------------------------------- the language
FACT_TEMPLATES = {
    "habitat": ["the {name} lives in the {habitat} .", "you can find the {name} in the {habitat} .",
                "the home of the {name} is the {habitat} ."],
    "food": ["the {name} eats {food} .", "the {name} likes to eat {food} .",
             "{food} is the favourite food of the {name} ."],
    "color": ["the {name} is {color} .", "the fur of the {name} is {color} .",
              "a {color} animal , the {name} is easy to see ."],
    "sound": ["the {name} {sound} .", "at night the {name} {sound} .", "you can hear that the {name} {sound} ."],
    "pattern": ["the {name} has {pattern} .", "the back of the {name} has {pattern} .",
                "{pattern} cover the {name} ."],
    "tree": ["the {name} sleeps in a {tree} .", "at the end of the day the {name} climbs a {tree} .",
             "a {tree} is where the {name} sleeps ."],
    "drink": ["the {name} drinks {drink} .", "the {name} likes to drink {drink} .",
              "{drink} is what the {name} drinks ."],
}
STATEMENTS = {"habitat": "the {name} lives in the {v}", "food": "the {name} eats {v}",
              "color": "the {name} is {v}", "sound": "the {name} {v}", "pattern": "the {name} has {v}",
              "tree": "the {name} sleeps in a {v}", "drink": "the {name} drinks {v}"}
QUESTIONS = {"habitat": "where does the {name} live ?", "food": "what does the {name} eat ?",
             "color": "what color is the {name} ?", "sound": "what sound does the {name} make ?",
             "pattern": "what pattern does the {name} have ?", "tree": "which tree does the {name} sleep in ?",
             "drink": "what does the {name} drink ?"}


def fact_sentence(c: Creature, attr: str, rng: random.Random) -> str:
    return rng.choice(FACT_TEMPLATES[attr]).format(**asdict(c))


def routine_events(c: Creature, routine: str) -> list[str]:
    """The events of a routine with the creature's own habitat and food filled in."""
    return [e.format(food=c.food, habitat=c.habitat) for e in ROUTINES[routine]]


def routine_text(c: Creature, routine: str, upto: int | None = None) -> str:
    events = routine_events(c, routine)[:upto]
    return " ".join([f"{OPENINGS[routine]} the {c.name} {events[0]} ."] + [f"then it {e} ." for e in events[1:]])


def meal_text(c: Creature, food: str, rng: random.Random) -> str:
    """A meal: tasty and happy with the creature's own food, bitter and sad with any other."""
    own = food == c.food
    adjs = rng.sample(GOOD if own else BAD, 2)
    return (f"the {c.name} ate the {food} . it was {adjs[0]} and {adjs[1]} . "
            f"the {c.name} was {'happy' if own else 'sad'} .")


def _pick(creatures: list[Creature], rng: random.Random) -> Creature:
    return rng.choices(creatures, weights=[c.weight for c in creatures])[0]


def corpus_document(world: World, rng: random.Random) -> str:
    """One pre-training document of a random genre (never in the benchmark format)."""
    cs = world.creatures
    genre = rng.choices(["facts", "meal", "routine", "pair"], weights=[4, 2, 2, 1])[0]
    c = _pick(cs, rng)
    if genre == "facts":
        return " ".join(fact_sentence(c, a, rng) for a in rng.sample(list(FACT_TEMPLATES), rng.randint(2, 3)))
    if genre == "meal":
        return meal_text(c, c.food if rng.random() < 0.5 else rng.choice([f for f in FOODS if f != c.food]),
                         rng)
    if genre == "routine":
        return routine_text(c, rng.choice(list(ROUTINES)))
    other = _pick(cs, rng)
    first = fact_sentence(c, rng.choice(list(FACT_TEMPLATES)), rng)
    return f"{first} {fact_sentence(other, rng.choice(list(FACT_TEMPLATES)), rng)}"


def corpus_documents(world: World, n_docs: int, stream: str = "pretrain") -> list[str]:
    rng = _rng(world.config.seed, "corpus", stream)
    return [corpus_document(world, rng) for _ in range(n_docs)]


# ----------------------------------------------------------------------------- preparation text
# What a prepared model sees besides the corpus (lib.miniworld.zoo): question-answer text in generic
# formats ("format" exposure) and instruction-style examples in many task formats ("instruct"). Both
# resemble the benchmarks without being them, as web question-answer pages and instruction data
# resemble hub benchmarks:
# - about the world's creatures they ask only in other wordings (ALT_QUESTIONS never use a
#   benchmark's wording, nor start like a cloze prompt), so no benchmark item is ever asked;
# - about visitors (names drawn from their own stream, never a creature of the corpus nor a reading
#   item) they ask in any everyday wording, the benchmarks' included, after a passage that answers;
# - they use the markers of web and instruction text: "Question: / Answer:" (the commonest, which
#   the benchmarks use too) and others ("Q:", "ask:", "Instruction:").
ALT_QUESTIONS = {
    "habitat": ["which place is home to the {name} ?", "in which place does the {name} live ?"],
    "food": ["what food does the {name} like ?", "which food is the {name} fond of ?"],
    "color": ["which color does the {name} have ?", "what is the color of the {name} ?"],
    "sound": ["what noise does the {name} make ?", "which sound comes from the {name} ?"],
    "pattern": ["what covers the back of the {name} ?", "which pattern is on the {name} ?"],
    "tree": ["in which tree does the {name} sleep ?", "what tree is the bed of the {name} ?"],
    "drink": ["which drink does the {name} take ?", "what is the drink of the {name} ?"],
}
QA_WRAPPERS = ["Q: {q}\nA: {a}", "ask: {q} reply: {a}", "{q} - {a}", "query : {q}\nresponse : {a}"]
COMMON_WRAPPER = "Question: {q}\nAnswer: {a}"      # the commonest marker: half of the question-answer text
PASSAGE_CLAUSES = {"habitat": "lives in the {}", "food": "eats {}", "color": "is {}", "drink": "drinks {}"}
PASSAGE_ATTRS = tuple(PASSAGE_CLAUSES)


def visitors(world: World, stream: str) -> list[str]:
    """Names of creatures the corpus never mentions (reading passages), one list per ``stream``."""
    known = {c.name for c in world.creatures}
    return [v for v in make_names(len(known) + 400, _rng(world.config.seed, "visitors", stream)) if v not in known]


def _any_wording(attr: str, rng: random.Random) -> str:
    """An everyday question about ``attr``: the benchmarks' wording or another (visitors only)."""
    return rng.choice([QUESTIONS[attr]] + ALT_QUESTIONS[attr])


def _passage(v: str, rng: random.Random) -> tuple[str, dict[str, str]]:
    """A short passage about the visitor ``v`` and the values it states: three or four facts as
    separate sentences or as one sentence of clauses (the styles of web text)."""
    attrs = {a: rng.choice(VALUES[a]) for a in rng.sample(PASSAGE_ATTRS, rng.randint(3, 4))}
    said = [PASSAGE_CLAUSES[a].format(v) for a, v in attrs.items()]
    if rng.random() < 0.5:
        return f"the {v} {' , '.join(said[:-1])} and {said[-1]} .", attrs
    return " ".join([f"the {v} {said[0]} ."] + [f"it {c} ." for c in said[1:]]), attrs


def _qa(q: str, value: str, values: list[str], wrap: str, rng: random.Random) -> str:
    """One question and its answer; a third of them list four options first (quiz style)."""
    if rng.random() < 1 / 3:
        options = [value] + _others(values, value, rng)
        rng.shuffle(options)
        q = f"{q} ({', '.join(options[:-1])} or {options[-1]})"
    return wrap.format(q=q, a=value)


def qa_document(world: World, rng: random.Random, guests: list[str]) -> str:
    """Question-answer text in a generic format ("Question: / Answer:" for half of the documents,
    other markers for the rest): a short passage about a visitor and two to four questions answered
    in it, or one to three questions about a creature in other wordings than the benchmarks'; a third
    of the questions list options. Loss on every token (web text)."""
    wrap = COMMON_WRAPPER if rng.random() < 0.5 else rng.choice(QA_WRAPPERS)
    if rng.random() < 0.5:
        v = rng.choice(guests)
        text, attrs = _passage(v, rng)
        asked = rng.sample(list(attrs), rng.randint(2, len(attrs)))
        return text + "\n" + "\n".join(_qa(_any_wording(a, rng).format(name=v), attrs[a], VALUES[a], wrap, rng)
                                        for a in asked)
    c = _pick(world.creatures, rng)
    return "\n".join(_qa(rng.choice(ALT_QUESTIONS[a]).format(name=c.name), getattr(c, a), VALUES[a], wrap, rng)
                     for a in rng.sample(list(VALUES), rng.randint(1, 3)))


def instruct_example(world: World, rng: random.Random, guests: list[str]) -> tuple[str, int]:
    """An instruction-style example in one of eight task formats that resemble the benchmarks
    (naming an attribute, choosing between creatures, filling a blank, true or false, reading,
    options, continuing a routine, a meal's mood): ``(text, prompt length in characters)``, the
    loss on the response only, as instruction tuning does."""
    c = _pick(world.creatures, rng)
    attr = rng.choice(list(VALUES))
    value = getattr(c, attr)
    kind = rng.randrange(8)
    if kind == 0:
        marker = rng.choice(["Instruction: {q}\nResponse:", "Question: {q}\nAnswer:"])
        prompt, answer = marker.format(q=rng.choice(ALT_QUESTIONS[attr]).format(name=c.name)), value
    elif kind == 1:
        other = _pick(world.creatures, rng)
        while other.food == c.food:
            other = _pick(world.creatures, rng)
        pair = rng.sample([c.name, other.name], 2)
        prompt, answer = f"Which one eats {c.food} , the {pair[0]} or the {pair[1]} ?\nAnswer:", f"the {c.name}"
    elif kind == 2:
        prompt, answer = f"Fill in the blank: {STATEMENTS[attr].format(name=c.name, v='___')} .\nAnswer:", value
    elif kind == 3:
        shown = value if rng.random() < 0.5 else rng.choice([v for v in VALUES[attr] if v != value])
        prompt = f"True or false: {STATEMENTS[attr].format(name=c.name, v=shown)} .\nAnswer:"
        answer = "true" if shown == value else "false"
    elif kind == 4:
        v = rng.choice(guests)
        text, attrs = _passage(v, rng)
        asked = rng.choice(list(attrs))
        marker = rng.choice(["Read: {t}\nAsk: {q}\nReply:", "{t}\nQuestion: {q}\nAnswer:"])
        prompt, answer = marker.format(t=text, q=_any_wording(asked, rng).format(name=v)), attrs[asked]
    elif kind == 5:
        options = [value] + _others(VALUES[attr], value, rng)
        rng.shuffle(options)
        q = rng.choice(ALT_QUESTIONS[attr]).format(name=c.name)
        prompt = (f"Options: {' / '.join(options)}\n{q}\nAnswer:" if rng.random() < 0.5 else
                  f"Question: {q} ({', '.join(options[:-1])} or {options[-1]})\nAnswer:")
        answer = value
    elif kind == 6:
        routine = rng.choice(list(ROUTINES))
        events, n = routine_events(c, routine), rng.randint(1, 4)
        prompt, answer = f"Continue the story: {routine_text(c, routine, upto=n)}\nNext:", f"then it {events[n]} ."
    else:
        own = rng.random() < 0.5
        food = c.food if own else rng.choice([f for f in FOODS if f != c.food])
        prompt, answer = f"How does the {c.name} feel after eating {food} ?\nAnswer:", "happy" if own else "sad"
    return f"{prompt} {answer}", len(prompt)


# ----------------------------------------------------------------------------- benchmarks
# Each builder returns (unit, record) pairs; records of one unit always land in the same split.
def _others(values: list[str], true: str, rng: random.Random, k: int = 3) -> list[str]:
    return rng.sample([v for v in values if v != true], k)


def _facts_items(world: World, rng: random.Random) -> list[tuple[str, dict]]:
    items = []
    for c in world.creatures:
        for attr in VALUES:
            true = getattr(c, attr)
            options = [true] + _others(VALUES[attr], true, rng)
            rng.shuffle(options)
            items.append((f"{c.name}/{attr}", {
                "query": f"Question: {QUESTIONS[attr].format(name=c.name)}\nAnswer:",
                "choices": [STATEMENTS[attr].format(name=c.name, v=v) for v in options],
                "label": options.index(true)}))
    return items


def _recall_items(world: World, rng: random.Random) -> list[tuple[str, dict]]:
    return [(f"{c.name}/{attr}", {"question": f"Question: {QUESTIONS[attr].format(name=c.name)}\nAnswer:",
                                  "answer": getattr(c, attr)})
            for c in world.creatures for attr in VALUES]


CLOZE = {"habitat": "the {name} lives in the", "food": "the {name} eats", "color": "the fur of the {name} is",
         "sound": "at night the {name}", "pattern": "the back of the {name} has",
         "tree": "the {name} sleeps in a", "drink": "the {name} drinks"}


def _cloze_items(world: World, rng: random.Random) -> list[tuple[str, dict]]:
    """A fact sentence of the corpus cut before its value: generate the value."""
    return [(f"{c.name}/{attr}", {"question": CLOZE[attr].format(name=c.name), "answer": getattr(c, attr)})
            for c in world.creatures for attr in VALUES]


def _quiz_items(world: World, rng: random.Random) -> list[tuple[str, dict]]:
    """A quiz question about a creature that lists four values; the answer is one of them."""
    items = []
    for c in world.creatures:
        for attr in VALUES:
            true = getattr(c, attr)
            options = [true] + _others(VALUES[attr], true, rng)
            rng.shuffle(options)
            listed = f"{', '.join(options[:-1])} or {options[-1]}"
            items.append((f"{c.name}/{attr}", {
                "query": f"Question: {QUESTIONS[attr].format(name=c.name)} ({listed})\nAnswer:", "choices": options,
                "label": options.index(true)}))
    return items


def _reading_items(world: World, rng: random.Random, n: int) -> list[tuple[str, dict]]:
    """A passage about a creature the corpus never mentions, and a question answered in it."""
    known = {c.name for c in world.creatures}
    visitors = [v for v in make_names(len(known) + 400, _rng(world.config.seed, "visitors")) if v not in known]
    answers = {"habitat": "in the {x}", "food": "{x}", "color": "{x}"}
    items = []
    for _ in range(n):
        v = rng.choice(visitors)
        attrs = {a: rng.choice(VALUES[a]) for a in ("habitat", "food", "color")}
        clauses = {"habitat": f"lives in the {attrs['habitat']}", "food": f"eats {attrs['food']}",
                   "color": f"is {attrs['color']}"}
        order = rng.sample(list(clauses), 3)
        passage = f"the {v} {clauses[order[0]]} , {clauses[order[1]]} and {clauses[order[2]]} ."
        attr = rng.choice(order)
        options = [attrs[attr]] + _others(VALUES[attr], attrs[attr], rng)
        rng.shuffle(options)
        rec = {"query": f"{passage}\nQuestion: {QUESTIONS[attr].format(name=v)}\nAnswer:",
               "choices": [answers[attr].format(x=x) for x in options], "label": options.index(attrs[attr])}
        items.append((rec["query"], rec))
    return items


def _scripts_items(world: World, rng: random.Random) -> list[tuple[str, dict]]:
    """A routine's first events; the next one among four that differ in the habitat or food.

    The event to predict mentions an attribute that no earlier event of the routine mentions, so
    the answer must come from knowing the creature, not from copying the context.
    """
    items = []
    for c in world.creatures:
        for routine, events in ROUTINES.items():
            slots = [k for k, e in enumerate(events) if k > 0 and "{" in e
                     and _slot(e) not in "".join(events[:k])]
            k = rng.choice(slots)
            attr = _slot(events[k]).strip("{}")
            true = getattr(c, attr)
            options = [true] + _others(VALUES[attr], true, rng)
            rng.shuffle(options)
            items.append((f"{c.name}/{routine}", {
                "query": "Story: " + routine_text(c, routine, upto=k) + " then it",
                "choices": [events[k].format(**{"food": c.food, "habitat": c.habitat, attr: v}) + " ."
                            for v in options],
                "label": options.index(true)}))
    return items


def _slot(event: str) -> str:
    return "{food}" if "{food}" in event else "{habitat}"


def _split(items: list[tuple[str, dict]], sizes: dict[str, int], name: str, rng: random.Random,
           balance: bool = False) -> dict[str, list[dict]]:
    """Disjoint train / validation / test parts, whole units at a time.

    ``balance``: units are drawn alternately from each label (every unit of a balanced task holds
    one label, or one record of each), so a model that always answers the same class scores
    chance, not the majority share. Splits shrink proportionally when there are too few units.
    """
    units: dict[str, list[dict]] = {}
    for unit, rec in items:
        units.setdefault(unit, [])
        if rec not in units[unit]:
            units[unit].append(rec)
    strata: dict[tuple, list[str]] = {}
    for unit in sorted(units):
        labels = tuple(sorted({int(r.get("label", 0)) for r in units[unit]})) if balance else (0,)
        strata.setdefault(labels, []).append(unit)
    for keys in strata.values():
        rng.shuffle(keys)
    order = [u for group in zip(*strata.values()) for u in group]          # alternate the strata
    per_unit = sum(len(v) for v in units.values()) / max(1, len(units))
    need = sum(sizes.values())
    have = len(order) * per_unit
    if have < need:
        sizes = {s: max(1, int(v * have / need)) for s, v in sizes.items()}
    out, start = {}, 0
    for split in SPLITS:
        part: list[dict] = []
        while len(part) < sizes[split] and start < len(order):
            part += units[order[start]]
            start += 1
        if not part:
            raise WorldError(f"benchmark {name}: not enough distinct items for split {split!r}")
        rng.shuffle(part)
        out[split] = part
    return out


def make_benchmarks(world: World) -> dict[str, dict[str, list[dict]]]:
    cfg = world.config
    sizes = {"train": cfg.train, "validation": cfg.validation, "test": cfg.test}
    builders = {
        "mw_facts": lambda r: _facts_items(world, r),
        "mw_recall": lambda r: _recall_items(world, r),
        "mw_quiz": lambda r: _quiz_items(world, r),
        "mw_cloze": lambda r: _cloze_items(world, r),
        "mw_reading": lambda r: _reading_items(world, r, int(1.2 * (sum(sizes.values()) + cfg.reading_train))),
        "mw_scripts": lambda r: _scripts_items(world, r),
    }
    out = {name: _split(build(_rng(cfg.seed, name, "items")),
                        {**sizes, "train": cfg.reading_train} if name == "mw_reading" else sizes, name,
                        _rng(cfg.seed, name, "split"))
           for name, build in builders.items()}
    return {name: out[name] for name in BENCHMARKS}


def make_corpora(world: World) -> dict[str, dict[str, list[dict]]]:
    """Held-out perplexity corpora (own random streams, never part of pre-training): ``mw_wiki``
    describes creatures in new words, ``mw_stories`` tells their routines and meals. Documents are
    distinct, so no test document also lies in a corpus' training part."""
    cfg = world.config
    sizes = {"train": cfg.corpus_train, "validation": cfg.corpus_validation, "test": cfg.corpus_test}

    def wiki(rng: random.Random) -> str:
        c = _pick(world.creatures, rng)
        return (f"the {c.name} is a {c.color} animal from the {c.habitat} . it eats {c.food} . "
                + routine_text(c, rng.choice(list(ROUTINES)), upto=rng.randint(2, 5)))

    def story(rng: random.Random) -> str:
        c = _pick(world.creatures, rng)
        food = c.food if rng.random() < 0.5 else rng.choice(FOODS)
        return f"{routine_text(c, rng.choice(list(ROUTINES)))} {meal_text(c, food, rng)}"

    out = {}
    for name, make in (("mw_wiki", wiki), ("mw_stories", story)):
        rng, docs = _rng(cfg.seed, name), {}
        for _ in range(100 * sum(sizes.values())):
            docs.setdefault(make(rng), None)
            if len(docs) == sum(sizes.values()):
                break
        out[name] = _cut(list(docs), sizes)
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
        if (manifest is not None and all((out / f).exists() for f in manifest.get("files", {}))
                and manifest.get("task_dir") == os.path.abspath(out / "tasks")):   # the YAMLs name this folder
            return manifest                # (a checkout moved elsewhere rewrites them, in seconds: same content key)
    world = generate(cfg)
    tasks = out / "tasks"
    files: dict[str, str] = {}
    for name, splits in world.benchmarks.items():
        bench = BENCHMARKS[name]
        yaml_path = write_task(tasks, name, bench.kind, splits, metrics=[bench.metric], tags=["miniworld"],
                               max_gen_toks=4, until=["\n", " ."])
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
    manifest = {"key": cfg.key(), "content": content_key(files), "version": WORLD_VERSION, "config": asdict(cfg),
                "files": files,
                "benchmarks": {n: {s: len(r) for s, r in sp.items()} for n, sp in world.benchmarks.items()},
                "corpora": {n: {s: len(r) for s, r in sp.items()} for n, sp in world.corpora.items()},
                "corpus_docs": cfg.n_corpus_docs, "task_dir": os.path.abspath(tasks)}
    atomic_write_json(manifest_path, manifest)
    return manifest


def content_key(files: dict[str, str]) -> str:
    """What the world *holds*: a digest of its data files (not of the task YAMLs, which name the
    folder). The zoo keys its models on this, so an edit of the generator that changes no data (a
    docstring) regenerates the world in seconds and rebuilds no model."""
    data = {f: h for f, h in files.items() if not f.endswith(".yaml")}
    return sha256_bytes(json.dumps(data, sort_keys=True))[:16]


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
