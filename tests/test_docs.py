"""The documentation: results tables written from the runs (runner.docblocks), links that resolve.

The published profile's blocks are checked against the outputs the test session makes (stages
04-07 of `published`, as `make all` makes them); the mini world's blocks are checked at the end of
`make all` (a warning), since the test suite does not train its zoo.
"""

from __future__ import annotations

import json
import re

import pytest

from lib import paths
from runner import docblocks, doctables


# --------------------------------------------------------------------------- a tiny profile to render from
@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A profile `toy` whose stage `01_x` wrote one summary, and a table `toy-table` that shows it."""
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    stage = tmp_path / "outputs" / "toy" / "01_x"
    stage.mkdir(parents=True)
    (stage / "summary.json").write_text(json.dumps({"tau": {"a": 0.5173, "b": 0.7552}, "ci": [0.449, 0.574]}))

    def toy_table(s):
        x = s("01_x")
        return [*doctables.header("", "value"), doctables.row("a", doctables.est(x["tau"]["a"], x["ci"])),
                doctables.row("b", doctables.f(x["tau"]["b"]))]

    monkeypatch.setitem(doctables.TABLES, "toy-table", toy_table)
    monkeypatch.setitem(doctables.BY_NAME, "01_x", None)          # the toy's stage in the registry
    doc = tmp_path / "doc.md"
    doc.write_text("# A doc\n\nSome text.\n\n<!-- results:toy/toy-table -->\n| old |\n<!-- /results -->\n\nAfter.\n")
    return doc


def test_write_fills_a_block_from_the_summary_and_check_then_passes(toy):
    rep = docblocks.write(files=[toy])
    assert len(rep.checked) == 1 and rep.diffs and not rep.skipped
    text = toy.read_text()
    assert "| a | 0.52 [0.45, 0.57] |\n| b | 0.76 |\n<!-- /results -->\n\nAfter.\n" in text
    assert text.startswith("# A doc\n\nSome text.\n\n<!-- results:toy/toy-table -->\n|  | value |")
    again = docblocks.check(files=[toy])
    assert len(again.checked) == 1 and again.diffs == []
    assert docblocks.write(files=[toy]).diffs == [] and toy.read_text() == text     # idempotent


def test_check_names_file_line_quoted_and_measured_number(toy):
    docblocks.write(files=[toy])
    lines = toy.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("| b |"))
    lines[k] = lines[k].replace("0.76", "0.77")                 # a number edited by hand
    toy.write_text("\n".join(lines) + "\n")
    rep = docblocks.check(files=[toy])
    assert [str(d) for d in rep.diffs] == [f"{toy}:{k + 1}: quoted 0.77, measured 0.76"]


def test_a_number_that_moved_within_its_stated_spread_passes_as_another_cpu_and_one_beyond_fails(toy, capsys):
    """Another arithmetic path moves the last digits: ``spread`` records how far (from the quotes to
    the outputs), and check then passes such a move, says so, and still fails a larger one."""
    docblocks.write(files=[toy])
    quoted = toy.read_text()
    summary = paths.OUTPUTS / "toy" / "01_x" / "summary.json"
    summary.write_text(json.dumps({"tau": {"a": 0.5273, "b": 0.7552}, "ci": [0.449, 0.574]}))   # another CPU
    rep = docblocks.check(files=[toy], spreads={})
    assert len(rep.diffs) == 1 and not rep.diffs[0].within_spread
    root = toy.parent
    (root / "docs").mkdir()
    assert docblocks.spread(files=[toy], root=root) == (2, 1)
    stated = docblocks.read_spreads(root)
    assert stated == {"toy/toy-table": {"| a | # [#, #] |": [0.01, 0.0, 0.0]}}      # b never moved: not listed
    rep = docblocks.check(files=[toy], spreads=stated)
    assert len(rep.diffs) == 1 and rep.diffs[0].within_spread and toy.read_text() == quoted
    summary.write_text(json.dumps({"tau": {"a": 0.5473, "b": 0.7552}, "ci": [0.449, 0.574]}))   # 0.02: too far
    assert not docblocks.check(files=[toy], spreads=stated).diffs[0].within_spread
    summary.write_text(json.dumps({"tau": {"a": 0.5173, "b": 0.7652}, "ci": [0.449, 0.574]}))   # b never moved
    assert not docblocks.check(files=[toy], spreads=stated).diffs[0].within_spread


def test_a_row_whose_text_moved_with_the_cpu_passes_only_as_spread_saw_it(toy, monkeypatch):
    """A row's text moves too (a verdict next to its bound, the name of a highest benchmark):
    ``spread`` records the other text, and check passes that text with its numbers within their
    spread, and nothing else."""
    def table(s):
        b = s("01_x")["tau"]["b"]
        verdict = "met" if b < 0.76 else "not met"
        return [*doctables.header("", "value", "verdict"), doctables.row("b", doctables.f(b), verdict)]

    monkeypatch.setitem(doctables.TABLES, "toy-table", table)
    docblocks.write(files=[toy])
    summary = paths.OUTPUTS / "toy" / "01_x" / "summary.json"
    summary.write_text(json.dumps({"tau": {"b": 0.7652}}))            # another CPU: 0.77, not met
    [d] = docblocks.check(files=[toy], spreads={}).diffs
    assert not d.within_spread and (d.quoted, d.measured) == ("'| b | 0.76 | met |'", "'| b | 0.77 | not met |'")
    (toy.parent / "docs").mkdir()
    assert docblocks.spread(files=[toy], root=toy.parent) == (1, 1)
    stated = docblocks.read_spreads(toy.parent)
    assert stated == {"toy/toy-table": {"| b | # | met |": {"spread": [0.01], "seen": ["| b | # | not met |"]}}}
    assert docblocks.check(files=[toy], spreads=stated).diffs[0].within_spread
    summary.write_text(json.dumps({"tau": {"b": 0.7752}}))            # 0.02: beyond the spread
    assert not docblocks.check(files=[toy], spreads=stated).diffs[0].within_spread
    assert docblocks.moved("| b | 0.76 | met |", "| b | 0.76 | maybe |", ["| b | # | not met |"]) is None
    monkeypatch.setitem(doctables.TABLES, "toy-table", lambda s: [*table(s)[:2], "| B | 0.78 | not met |"])
    assert docblocks.spread(files=[toy], root=toy.parent) == (0, 0)       # a renamed row is no CPU's doing


def test_check_reports_missing_rows_and_changed_text(toy):
    docblocks.write(files=[toy])
    text = toy.read_text()
    toy.write_text(text.replace("| b | 0.76 |\n", "").replace("| a |", "| A |"))
    found = [(d.quoted, d.measured) for d in docblocks.check(files=[toy]).diffs]
    assert ("'| A | 0.52 [0.45, 0.57] |'", "'| a | 0.52 [0.45, 0.57] |'") in found
    assert ("(no line)", "'| b | 0.76 |'") in found


def test_a_profile_that_has_not_run_is_skipped_and_named(toy, tmp_path):
    (tmp_path / "outputs" / "toy" / "01_x" / "summary.json").unlink()
    rep = docblocks.check(files=[toy])
    assert rep.checked == [] and "outputs/toy/01_x/summary.json is missing" in rep.skipped["toy"]
    assert "make run PROFILE=toy STAGES=01" in rep.skipped["toy"]
    before = toy.read_text()
    docblocks.write(files=[toy])
    assert toy.read_text() == before                            # left as it is


def test_malformed_blocks_are_one_line_errors_naming_file_and_line(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("x\n<!-- results:published/no-such-table -->\n| |\n<!-- /results -->\n")
    with pytest.raises(docblocks.DocError, match=r"bad.md:2: unknown results table 'no-such-table'"):
        docblocks.blocks(bad)
    bad.write_text("x\n\n<!-- results:published/agreement -->\n| |\n")
    with pytest.raises(docblocks.DocError, match=r"bad.md:3: .* has no closing `<!-- /results -->`"):
        docblocks.blocks(bad)
    bad.write_text("<!-- results: published agreement -->\n")
    with pytest.raises(docblocks.DocError, match=r"bad.md:1: a results marker must read"):
        docblocks.blocks(bad)


def test_warn_is_one_line_naming_make_docs_and_never_fails(toy, monkeypatch, capsys):
    docblocks.write(files=[toy])
    toy.write_text(toy.read_text().replace("0.76", "0.70"))
    monkeypatch.setattr(docblocks, "doc_files", lambda root=None: [toy])
    assert docblocks.main(["check", "--warn", "toy"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: 1 quoted line(s)") and "make docs" in err[0]
    assert docblocks.main(["check", "toy"]) == 1
    out = capsys.readouterr()
    assert "quoted 0.70, measured 0.76" in out.out and "run `make docs`" in out.err


def test_a_table_that_fails_on_written_outputs_is_a_bug_not_missing_outputs(toy, monkeypatch, capsys):
    """A renamed summary key (KeyError), a wrong index or a plain bug in a table names the block, the
    table's function and the exception, and fails `make check-docs` with exit 2; `make all`'s check
    warns in one line."""
    def renamed_key(s):
        return [doctables.row(s("01_x")["tau_renamed"])]

    monkeypatch.setitem(doctables.TABLES, "toy-table", renamed_key)
    with pytest.raises(docblocks.TableBug, match=r"doc.md:5: table 'toy-table' \(.*renamed_key\) failed on "
                                                 r"outputs/toy: KeyError: 'tau_renamed'"):
        docblocks.check(files=[toy])
    monkeypatch.setattr(docblocks, "doc_files", lambda root=None: [toy])
    assert docblocks.main(["check", "toy"]) == 2
    assert "error: " in capsys.readouterr().err
    assert docblocks.main(["check", "--warn", "toy"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and "KeyError" in err[0]


# The profile each docs block names -> the profile the test suite builds whose summaries have the same
# keys (smoke runs every stage of the mini world's design, place_smoke is place_mini's, real_cpu's
# stages 01-03 are smoke's); test_smoke_profile, test_placement and the published test below render
# every block's table against these.
STAND_INS = {"mini": "smoke", "real_cpu": "smoke", "place_mini": "place_smoke", "published": "published"}


def test_every_table_is_quoted_and_every_quoted_profile_has_a_stand_in_the_suite_builds():
    found = [b for path in docblocks.doc_files() for b in docblocks.blocks(path)]
    assert {b.table for b in found} == set(doctables.TABLES), "a table no docs block names, or the reverse"
    assert {b.profile for b in found} <= set(STAND_INS), {b.profile for b in found} - set(STAND_INS)
    for name, fn in doctables.TABLES.items():
        assert fn.__module__ in docblocks.TABLE_MODULES, f"{name}: {fn.__module__} is not in TABLE_MODULES"


def rendered_against_stand_ins(stand_in: str) -> dict[str, list[str]]:
    """Every docs block whose profile's stand-in is ``stand_in``, rendered from that profile's
    summaries (``file:line table`` -> lines); raises what the table raises."""
    import dataclasses

    cache: dict = {}
    out = {}
    for path in docblocks.doc_files():
        for b in docblocks.blocks(path):
            if STAND_INS[b.profile] == stand_in:
                out[f"{paths.show(path)}:{b.line} {b.table}"] = docblocks.render(
                    dataclasses.replace(b, profile=stand_in), cache)
    return out


def test_a_table_asks_for_a_stage_by_its_registry_name():
    """A misspelt stage is a KeyError naming the registry, not a summary reported missing."""
    with pytest.raises(KeyError, match="no stage '04_rank_agrement' in lib.stages.STAGES"):
        doctables.Summaries("published")("04_rank_agrement")


def test_number_formats():
    assert doctables.f(-0.001) == "0.00" and doctables.f(0.004, sign=True) == "0.00"
    assert doctables.f(-0.0251, sign=True) == "-0.03" and doctables.f(float("nan")) == "n/a"
    assert doctables.gain(0.2379, [0.1995, 0.2870]) == "+0.24 [0.20, 0.29]"
    assert doctables.est(-0.24, [-0.61, 0.16], sign=True) == "-0.24 [-0.61, +0.16]"
    assert doctables.pct(0.6202) == "62 %"


# --------------------------------------------------------------------------- links
def test_every_relative_link_in_readme_and_docs_resolves():
    files = docblocks.doc_files()
    assert paths.ROOT / "README.md" in files and len(files) >= 6, files     # README + docs/*.md
    broken = docblocks.broken_links(files)
    assert broken == [], "\n".join(broken)


def test_broken_links_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title here\n\n## The `make all` run, step 2\n")
    a = tmp_path / "a.md"
    a.write_text("[ok](docs/b.md) [ok](docs/b.md#title-here) [ok](docs/b.md#the-make-all-run-step-2) "
                 "[web](https://example.org/x) [self](#top) ![img](docs/missing.png)\n"
                 "[bad](docs/c.md) [bad anchor](docs/b.md#nowhere)\n\n# Top\n`[not](a-link.md)`\n")
    broken = docblocks.broken_links([a])
    assert [re.sub(r".*a.md:", "", b) for b in broken] == [
        "1: docs/missing.png does not exist", "2: docs/c.md does not exist",
        "2: docs/b.md#nowhere: no such heading in docs/b.md"], broken


def test_readme_is_short():
    lines = (paths.ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 260, len(lines)


# --------------------------------------------------------------------------- the published blocks
@pytest.mark.slow
@pytest.mark.published
def test_published_blocks_agree_with_the_run_and_an_edit_fails(published_run, tmp_path):
    """The run is on other kernels than `make all`'s (tests/conftest.py): every quoted number holds
    there as quoted or within its stated spread, as it must on another CPU."""
    rep = docblocks.check(profiles=["published"])
    assert {b.table for b in rep.checked} >= {"headline", "benchalign-short", "benchalign", "noise"}, rep.skipped
    assert not rep.skipped, rep.skipped
    real = [d for d in rep.diffs if not d.within_spread]
    assert real == [], "\n".join(map(str, real)) + "\n(run `make docs` and commit)"
    # a quoted number edited by hand: the check names the file, the line, the quoted and the measured value
    readme = paths.ROOT / "README.md"
    lines = readme.read_text().splitlines()
    block = next(b for b in docblocks.blocks(readme) if b.profile == "published" and b.table == "headline")
    k = block.line + 2                                          # 0-based index of the first data row
    measured = re.search(r"\d\.\d\d", lines[k]).group()
    edited = f"{float(measured) + 0.01:.2f}"
    lines[k] = lines[k].replace(measured, edited, 1)
    copy = tmp_path / "README.md"
    copy.write_text("\n".join(lines) + "\n")
    diffs = [d for d in docblocks.check(files=[copy], profiles=["published"]).diffs if not d.within_spread]
    assert [str(d) for d in diffs] == [f"{copy}:{k + 1}: quoted {edited}, measured {measured}"]


def test_make_all_ends_with_the_docs_warning_and_make_docs_targets_exist():
    """`make all` checks the blocks of the profiles it ran (one line, never a failure); `make docs`
    and `make check-docs` call the module."""
    text = (paths.ROOT / "Makefile").read_text()
    recipe = re.search(r"^all:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert recipe.splitlines()[-1].strip() == \
        "@$(PY) -m runner.docblocks check --warn $(PROFILE) $(if $(filter mini,$(PROFILE)),published,)"
    assert re.search(r"^docs:.*\n\t\$\(PY\) -m runner\.docblocks write$", text, re.M)
    assert re.search(r"^check-docs:.*\n\t\$\(PY\) -m runner\.docblocks check$", text, re.M)


def test_a_timing_moves_with_the_machine_and_is_never_a_difference(tmp_path):
    """Seconds a run recorded ("4,282 s") depend on the machine and its load: the check passes a row
    whose only change is a timing, and still fails one whose result moved beside it."""
    block = docblocks.Block(tmp_path / "x.md", 1, "mini", "t", ["| cost | 0.54 [0.41, 0.68]; 4,282 s; 8.2e+13 FLOPs |"])
    assert docblocks.differences(block, ["| cost | 0.54 [0.41, 0.68]; 3,120 s; 8.2e+13 FLOPs |"]) == []
    (diff,) = docblocks.differences(block, ["| cost | 0.55 [0.41, 0.68]; 3,120 s; 8.2e+13 FLOPs |"])
    assert (diff.quoted, diff.measured) == ("0.54", "0.55")
    assert docblocks.untimed("5 seeds, 12.5 s, 1,231 s") == "5 seeds, ~ s, ~ s"
