"""Results tables in README.md and docs/*.md, written from the runs' ``summary.json`` files.

A results table lives between two markers that name a profile and a table::

    <!-- results:published/agreement -->
    | ... the table, generated ... |
    <!-- /results -->

``make docs`` (``write``) rewrites every block of a profile whose outputs exist from
:data:`runner.doctables.TABLES` and copies the headline figure; ``make check-docs`` (``check``)
lists every line whose numbers differ from what is quoted, exiting 1. A table that fails other than
by missing outputs is reported as a bug (:class:`TableBug`). So no number in a table is typed by
hand. ``make all`` ends with ``check --warn``: one line, never a failure.

Numbers that training computes move in their last digits with the CPU that computed them (its
kernels round differently, and training amplifies a last bit into another model). :data:`SPREADS`
records, per quoted number, how far it was seen to move between two arithmetic paths (``python -m
runner.docblocks spread`` after a run on another CPU, before ``make docs``), and the other texts a row
was seen with there (the name of a highest benchmark, a verdict near its bound); a difference within
it is reported as "computed on another CPU" and passes.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import re
import shutil
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lib import paths, util
from runner.doctables import TABLES, Missing, Summaries

START = re.compile(r"^<!-- results:(?P<profile>[A-Za-z0-9_]+)/(?P<table>[A-Za-z0-9_-]+) -->\s*$")
END = "<!-- /results -->"
NUMBER = re.compile(r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?")
# a timing ("4,282 s"): it moves with the machine and its load, so the check compares it with nothing
TIMING = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?= s\b)")
SPREADS = "docs/spreads.json"   # {"profile/table": {row with its numbers as #: [spread of each number]}}, or
                                # {row: {"spread": [...], "seen": [its other texts, numbers as #]}};
                                # a row that is not there moved nowhere: it must read as quoted
# The figure at the top of README.md: written by `make docs` from the published profile's outputs.
HEADLINE = ("published", "04_rank_agreement", "figures/tau_heatmaps.png", "docs/figures/headline.png")


def doc_files(root: Path | None = None) -> list[Path]:
    """README.md and every Markdown file under docs/: where results blocks may live."""
    root = root or paths.ROOT
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


# ----------------------------------------------------------------------------- the tables
# The modules whose tables the blocks name (each registers its own in runner.doctables.TABLES).
TABLE_MODULES = ("runner.tables.analysis", "runner.tables.miniworld", "runner.tables.pipeline",
                 "runner.tables.benchalign", "runner.tables.placement")
for _module in TABLE_MODULES:
    importlib.import_module(_module)


# ----------------------------------------------------------------------------- blocks in a file
@dataclass
class Block:
    path: Path
    line: int                    # 1-based line of the opening marker
    profile: str
    table: str
    body: list[str]              # the lines between the markers, as quoted


class DocError(Exception):
    """A malformed block (no closing marker, an unknown table): names the file and line."""


def blocks(path: Path, lines: list[str] | None = None) -> list[Block]:
    """Every results block of a file."""
    lines = path.read_text(encoding="utf-8").splitlines() if lines is None else lines
    out, i = [], 0
    while i < len(lines):
        m = START.match(lines[i])
        if not m:
            if lines[i].startswith("<!-- results:"):
                raise DocError(f"{paths.show(path)}:{i + 1}: a results marker must read "
                               f"`<!-- results:<profile>/<table> -->`, not {lines[i].strip()!r}")
            i += 1
            continue
        if m["table"] not in TABLES:
            raise DocError(f"{paths.show(path)}:{i + 1}: unknown results table {m['table']!r} "
                           f"(known: {', '.join(sorted(TABLES))}; runner/doctables.py)")
        try:
            end = lines.index(END, i + 1)
        except ValueError:
            raise DocError(f"{paths.show(path)}:{i + 1}: results block {m['profile']}/{m['table']} has no "
                           f"closing `{END}`") from None
        out.append(Block(path, i + 1, m["profile"], m["table"], lines[i + 1:end]))
        i = end + 1
    return out


class TableBug(Exception):
    """A table raised something other than :class:`Missing`: a bug in the table or in the report whose
    keys it reads (a renamed key, say), never missing outputs."""


def render(block: Block, cache: dict[str, Summaries]) -> list[str]:
    """The block's table as the profile's outputs say now (:class:`Missing` when they do not exist,
    :class:`TableBug` naming the table's function when it fails otherwise)."""
    s = cache.setdefault(block.profile, Summaries(block.profile))
    fn = TABLES[block.table]
    try:
        return fn(s)
    except Missing:
        raise
    except Exception as exc:
        raise TableBug(f"{paths.show(block.path)}:{block.line}: table {block.table!r} ({fn.__module__}.{fn.__name__}) "
                       f"failed on outputs/{block.profile}: {type(exc).__name__}: {exc}") from exc


# ----------------------------------------------------------------------------- comparing
@dataclass
class Difference:
    path: Path
    line: int
    quoted: str
    measured: str
    block: int = 0               # the line of its block's opening marker
    within_spread: bool = False  # moved no further than its stated spread, in a text the spreads saw

    def __str__(self) -> str:
        return f"{paths.show(self.path)}:{self.line}: quoted {self.quoted}, measured {self.measured}"


def row_key(line: str) -> str:
    """A table row with its numbers masked: the same row whatever a run computed."""
    return NUMBER.sub("#", line)


def label(line: str) -> str:
    """A table row's first cell, which names the row: another CPU may move the rest of a row's
    text, never this (a changed label is a change of the table, not of the arithmetic)."""
    return line.split("|")[1].strip() if line.startswith("|") and line.count("|") > 1 else line


def untimed(line: str) -> str:
    """``line`` with its timings (:data:`TIMING`) replaced by ``~``: what the check compares."""
    return TIMING.sub("~", line)


def moved(quoted: str, measured: str, seen: Iterable[str] = ()) -> list[float] | None:
    """How far each number of a row moved from ``quoted`` to ``measured`` (None when the rows hold
    other counts of numbers, or other text that is not among the row's ``seen`` texts)."""
    nq, nm = NUMBER.findall(quoted), NUMBER.findall(measured)
    if len(nq) != len(nm) or row_key(measured) not in {row_key(quoted), *seen}:
        return None
    return [abs(float(a.replace(",", "")) - float(b.replace(",", ""))) for a, b in zip(nq, nm)]


def read_spreads(root: Path | None = None) -> dict[str, dict[str, list[float] | dict]]:
    """:data:`SPREADS` (empty when there is none)."""
    path = (root or paths.ROOT) / SPREADS
    return util.read_json(path) if path.exists() else {}


def stated_for(table: dict, quoted: str) -> tuple[list[float] | None, list[str]]:
    """(the spread of each number, the other texts seen) that ``table``'s spreads state for a quoted row."""
    entry = table.get(row_key(quoted))
    return (entry["spread"], entry["seen"]) if isinstance(entry, dict) else (entry, [])


def differences(block: Block, measured: list[str], spreads: dict | None = None) -> list[Difference]:
    """Each line of the block that differs from its table: the numbers that differ (or the whole
    line when the text differs, or a line is missing), each marked ``within_spread`` when every
    number moved no more than ``spreads`` says it may, and its text is one they saw."""
    out = []
    stated = (spreads or {}).get(f"{block.profile}/{block.table}", {})
    for k, (quoted, m) in enumerate(itertools.zip_longest(block.body, measured)):
        q, m = (untimed(x) if x is not None else None for x in (quoted, m))
        if q == m:
            continue
        line = block.line + 1 + k
        if q is None or m is None:
            out.append(Difference(block.path, line, repr(q) if q is not None else "(no line)",
                                  repr(m) if m is not None else "(no line)", block.line))
            continue
        spread_of, seen = stated_for(stated, quoted)
        by = moved(q, m, seen)
        limits = spread_of if spread_of is not None else [0.0] * len(by or ())     # not listed: moved nowhere
        within = by is not None and len(limits) == len(by) and all(d <= a + 1e-9 for d, a in zip(by, limits))
        if row_key(q) == row_key(m):          # only numbers moved: name them
            pairs = [(a, b) for a, b in zip(NUMBER.findall(q), NUMBER.findall(m)) if a != b]
            out.append(Difference(block.path, line, " ".join(a for a, _ in pairs),
                                  " ".join(b for _, b in pairs), block.line, within))
        else:
            out.append(Difference(block.path, line, repr(q), repr(m), block.line, within))
    return out


@dataclass
class BlocksCheck:
    """What :func:`check` or :func:`write` did: the blocks it read, the profiles it passed over, the differences."""
    checked: list[Block]
    skipped: dict[str, str]              # profile -> why its blocks were not checked
    diffs: list[Difference]


def _rendered(found: Iterable[Block], profiles: list[str] | None, skipped: dict[str, str],
              cache: dict[str, Summaries]) -> Iterator[tuple[Block, list[str]]]:
    """(block, its lines rendered from the outputs) for each of ``found`` of ``profiles``; a profile
    whose outputs are missing goes into ``skipped`` with the reason, and its blocks are passed over."""
    for block in found:
        if (profiles and block.profile not in profiles) or block.profile in skipped:
            continue
        try:
            yield block, render(block, cache)
        except Missing as exc:
            skipped[block.profile] = str(exc)


def check(files: list[Path] | None = None, profiles: list[str] | None = None,
          spreads: dict | None = None, rewrite: bool = False) -> BlocksCheck:
    """Render every block (of ``profiles``, default all) and compare it with what is quoted, under
    the stated ``spreads`` (default :func:`read_spreads`); with ``rewrite``, write what differs."""
    cache: dict[str, Summaries] = {}
    spreads = {} if rewrite else read_spreads() if spreads is None else spreads
    checked, skipped, diffs = [], {}, []
    for path in files or doc_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        redo = []
        for block, measured in _rendered(blocks(path, lines), profiles, skipped, cache):
            checked.append(block)
            found = differences(block, measured, spreads)
            diffs += found
            if found:
                redo.append((block, measured))
        for block, measured in reversed(redo if rewrite else []):      # from the end: earlier line numbers hold
            lines[block.line:block.line + len(block.body)] = measured
        if rewrite and redo:
            util.atomic_write_text(path, "\n".join(lines) + "\n")
    return BlocksCheck(checked, skipped, diffs)


def spread(files: list[Path] | None = None, profiles: list[str] | None = None,
           root: Path | None = None) -> tuple[int, int]:
    """Widen :data:`SPREADS` to cover how far each quoted number lies from the outputs now (a run on
    another CPU, or under another arithmetic setting, than the one quoted), and the other text a row
    reads with there, its :func:`label` kept; run it before ``make docs`` rewrites the quotes. Returns
    (rows measured, rows whose spread widened). A row that holds another count of numbers, or another
    label, is never covered."""
    path = (root or paths.ROOT) / SPREADS
    spreads = read_spreads(root)
    cache: dict[str, Summaries] = {}
    measured_rows = widened = 0
    for doc in files or doc_files(root):
        for block, measured in _rendered(blocks(doc), profiles, {}, cache):
            table = spreads.setdefault(f"{block.profile}/{block.table}", {})
            for q, m in zip(block.body, measured):
                text = row_key(untimed(m))                  # the row as measured, numbers masked
                by = moved(untimed(q), untimed(m), [text] if label(q) == label(m) else [])
                if by is None or not NUMBER.search(q):
                    continue
                measured_rows += 1
                old, seen = stated_for(table, q)
                old = old or [0.0] * len(by)
                new = [round(max(a, b), 10) for a, b in zip(old, by)]
                new_seen = [*seen, text] if text not in seen and text != row_key(untimed(q)) else seen
                if (new, new_seen) != (old, seen) and (any(new) or new_seen):   # a row that never moved is not listed
                    widened += 1
                    table[row_key(q)] = {"spread": new, "seen": new_seen} if new_seen else new
    tables = {k: dict(sorted(v.items())) for k, v in sorted(spreads.items()) if v}
    util.atomic_write_text(path, "{\n" + ",\n".join(            # a row a line: diffs stay readable
        f"{json.dumps(k)}: {{\n" + ",\n".join(f"  {json.dumps(r)}: {json.dumps(v)}" for r, v in rows.items()) + "\n}"
        for k, rows in tables.items()) + "\n}\n")
    return measured_rows, widened


def write(files: list[Path] | None = None, profiles: list[str] | None = None) -> BlocksCheck:
    """Rewrite every block (of ``profiles``) from the outputs; blocks of a profile that has not run
    are left as they are (and named in what it returns)."""
    return check(files, profiles, rewrite=True)


def copy_headline() -> Path | None:
    """Copy the headline figure from the published outputs into docs/figures/ (None: not run yet)."""
    profile, stage, name, target = HEADLINE
    src = paths.stage_dir(profile, stage) / name
    if not src.exists():
        return None
    dst = paths.ROOT / target
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists() or dst.read_bytes() != src.read_bytes():
        shutil.copyfile(src, dst)
    return dst


# ----------------------------------------------------------------------------- links
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")


def _prose(lines: list[str], code: bool = False) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code, inline code removed unless ``code``."""
    out, fenced = [], False
    for k, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((k, line if code else CODE_SPAN.sub("", line)))
    return out


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (a repeated heading gets ``-1``, ``-2``, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose(path.read_text(encoding="utf-8").splitlines(), code=True):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def broken_links(files: list[Path]) -> list[str]:
    """Every relative link or image in ``files`` whose target file (or heading) does not exist,
    as ``file:line: why``; web links are not followed."""
    out = []
    for path in files:
        for k, line in _prose(path.read_text(encoding="utf-8").splitlines()):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):          # https:, mailto:, ...
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                if not dest.exists():
                    out.append(f"{paths.show(path)}:{k}: {file_part} does not exist")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    out.append(f"{paths.show(path)}:{k}: {target}: no such heading in {file_part or paths.show(path)}")
    return out


# ----------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.docblocks", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("write", "check", "spread"))
    ap.add_argument("profiles", nargs="*", help="only the blocks of these profiles (default: every profile that ran)")
    ap.add_argument("--warn", action="store_true", help="check: one line on a difference, exit status 0")
    args = ap.parse_intermixed_args(argv)
    try:
        if args.action == "spread":
            rows, widened = spread(profiles=args.profiles or None)
            print(f"docs: {rows} quoted rows compared with outputs/, {widened} spreads widened in {SPREADS}")
            return 0
        outcome = (write if args.action == "write" else check)(profiles=args.profiles or None)
    except (DocError, TableBug) as exc:
        print(f"{'warning' if args.warn else 'error'}: {exc}", file=sys.stderr)
        return 0 if args.warn else 2
    for profile, why in outcome.skipped.items():
        what = "left as they are" if args.action == "write" else "not checked"
        print(f"docs: the {profile} blocks are {what}: {why}", file=sys.stderr)
    changed = sorted({(paths.show(d.path), d.block) for d in outcome.diffs})
    if args.action == "write":
        fig = copy_headline() if not args.profiles or HEADLINE[0] in args.profiles else None
        print(f"docs: {len(outcome.checked)} results block(s) from outputs/, {len(changed)} rewritten"
              + "".join(f"\n  rewrote {p}:{line}" for p, line in changed)
              + (f"\ndocs: headline figure {paths.show(fig)}" if fig else ""))
        return 0
    real = [d for d in outcome.diffs if not d.within_spread]
    moved_lines = len(outcome.diffs) - len(real)
    another_cpu = (f"computed on another CPU: {moved_lines} quoted line(s) moved, each within its "
                   f"stated spread ({SPREADS})") if moved_lines else ""
    if args.warn:
        if real:
            print(f"warning: {len(real)} quoted line(s) in README.md / docs/ differ from outputs/ "
                  f"(first: {real[0]}): run `make docs` to rewrite them", file=sys.stderr)
        elif another_cpu:
            print(f"docs: {another_cpu}", file=sys.stderr)
        return 0
    for d in real:
        print(d)
    if not outcome.checked:
        print("error: no results block could be checked (no profile's outputs): run `make all` first",
              file=sys.stderr)
        return 2
    if real:
        print(f"check-docs: {len(real)} line(s) in {len({(paths.show(d.path), d.block) for d in real})} block(s) "
              "differ from the outputs: run `make docs` to rewrite them", file=sys.stderr)
        return 1
    profiles = sorted({b.profile for b in outcome.checked})
    print(f"check-docs: {len(outcome.checked)} results block(s) of {', '.join(profiles)} agree with the outputs"
          + (f"; {another_cpu}" if another_cpu else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
