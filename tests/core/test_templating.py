"""The text the tool renders from templates: found by name (a user's ./templates/ first), HTML autoescaped,
errors naming the template file; and the systemd units `metrics --systemd` writes, run and checked for real."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane import paths, templating
from gb300lane.cards import load_card, register, rescore, run_card, score
from gb300lane.cards.record.receipts import Receipts
from gb300lane.cli.main import app
from gb300lane.errors import TemplateError
from gb300lane.promote.units import SYSTEMD_UNITS, systemd_quote, systemd_units

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"
SHIPPED = ("card.html", "card.css", "card.md", "docker-run.sh", *SYSTEMD_UNITS)
runner = CliRunner()


@pytest.fixture
def receipts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Receipts:
    """A tested card run on the fake lane, scored, then re-scored with a reason that is not text-safe HTML."""
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    card, p = load_card(DATA / "tested.yaml")
    rec = register(card, p.read_text())
    run_card(rec, ops=fakes.FakeLane(card, {"B": 1.03}, tps={"B": 1.03}, noise=0.03, n_transcripts=20).ops())
    score(rec)
    rescore(rec, "margin <script>alert(1)</script> & tighter", ["decode-no-loss.margin=0.04"])
    return rec


def test_the_shipped_templates_live_at_the_top_of_the_repository() -> None:
    shipped = paths.shipped("templates")
    assert shipped == Path(__file__).resolve().parents[2] / "templates"
    assert sorted(p.name for p in shipped.iterdir()) == sorted(SHIPPED)


@pytest.mark.slow
def test_card_report_renders_its_page_from_the_templates_autoescaped(receipts: Receipts) -> None:
    res = runner.invoke(app, ["card", "report", str(receipts.root), "--json"])
    assert res.exit_code == 0, res.output
    page = (receipts.report_dir(2) / "card.html").read_text()
    css = (paths.shipped("templates") / "card.css").read_text()
    assert page.startswith('<!DOCTYPE html><html lang="en">') and f"<style>\n{css}</style>" in page
    # The re-score's reason is text: escaped, never markup.
    assert "margin &lt;script&gt;alert(1)&lt;/script&gt; &amp; tighter" in page and "<script>" not in page
    md = (receipts.report_dir(2) / "card.md").read_text()
    assert (
        "re-score of verdict 1 (" in md and "margin <script>alert(1)</script> & tighter" in md
    )  # markdown: as written


@pytest.mark.slow
def test_a_template_in_the_working_directory_overrides_the_shipped_one(
    receipts: Receipts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    (work / "templates").mkdir(parents=True)
    (work / "templates" / "card.html").write_text(
        "<p id=mine>{{ card.name }}: {{ verdict.verdict }} ({{ verdict.reason }})</p>\n"
    )
    monkeypatch.chdir(work)
    assert paths.template_dirs() == (work / "templates", paths.shipped("templates"))
    res = runner.invoke(app, ["card", "report", str(receipts.root)])
    assert res.exit_code == 0, res.output
    page = (receipts.report_dir(2) / "card.html").read_text()
    assert page.startswith("<p id=mine>tested:") and "&lt;script&gt;" in page  # the user's template, autoescaped too
    # The templates the user did not copy are the shipped ones.
    assert (receipts.report_dir(2) / "card.md").read_text().startswith("# ")


def test_html_templates_escape_and_text_templates_do_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "x.html").write_text("{{ v }}|{{ m }}")
    (tmp_path / "x.md").write_text("{{ v }}")
    (tmp_path / "x.sh").write_text("echo {{ v | shquote }}")
    monkeypatch.setenv("GB300LANE_TEMPLATES_DIR", str(tmp_path))
    assert templating.render("x.html", v="<b>'&'</b>", m=templating.markup("<i>ok</i>")) == (
        "&lt;b&gt;&#39;&amp;&#39;&lt;/b&gt;|<i>ok</i>"
    )
    assert templating.render("x.md", v="<b>") == "<b>"
    assert shlex.split(templating.render("x.sh", v="it's $HOME; rm -rf /")) == ["echo", "it's $HOME; rm -rf /"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("{% if %}", "x.html:1: "), ("line one\n{{ nosuch }}", "x.html: 'nosuch' is undefined"), (None, "not found in")],
)
def test_a_broken_or_missing_template_names_the_file_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None, expected: str
) -> None:
    if text is not None:
        (tmp_path / "x.html").write_text(text)
    monkeypatch.setenv("GB300LANE_TEMPLATES_DIR", str(tmp_path))
    with pytest.raises(TemplateError) as err:
        templating.render("x.html")
    assert expected in str(err.value) and ("remove your copy" in str(err.value) or "templates/x.html" in str(err.value))


def _systemd_words(line: str) -> list[str]:
    """An ExecStart= value read back as systemd does (double quotes with backslash escapes; %% and $$ undone)."""
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line)]


@pytest.mark.slow
def test_the_timer_service_writes_the_textfile_when_run(tmp_path: Path) -> None:
    textfile = tmp_path / "node exporter" / "lane 100%$x.prom"
    units = systemd_units(
        textfile,
        every_s=30,
        program=[sys.executable, "-m", "gb300lane"],
        workdir=tmp_path,
        environment={"GB300LANE_STATE_DIR": os.environ["GB300LANE_STATE_DIR"]},
    )
    service, timer = units["gb300lane-metrics.service"], units["gb300lane-metrics.timer"]
    assert "OnUnitActiveSec=30s" in timer and "Unit=gb300lane-metrics.service" in timer
    fields = dict(line.split("=", 1) for line in service.splitlines() if "=" in line and not line.startswith("#"))
    argv = _systemd_words(fields["ExecStart"])
    assert argv == [sys.executable, "-m", "gb300lane", "metrics", "--textfile", str(textfile)], argv
    # What the service would run, run: the textfile it names is written.
    env = {**os.environ, **dict(w.split("=", 1) for w in _systemd_words(fields["Environment"]))}
    done = subprocess.run(argv, cwd=fields["WorkingDirectory"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "gb300lane_facts_up" in textfile.read_text()


def test_systemd_reads_the_units_back(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd); the units are checked where it is")
    res = runner.invoke(
        app,
        [
            "metrics",
            "--textfile",
            str(tmp_path / "a b" / "lane.prom"),
            "--systemd",
            str(tmp_path / "units"),
            "--every",
            "15",
        ],
    )
    assert res.exit_code == 0, res.output
    files = [str(tmp_path / "units" / name) for name in SYSTEMD_UNITS]
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *files], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    assert systemd_quote("/a b/%h$x") == '"/a b/%%h$$x"' and systemd_quote("A=%h$x", command=False) == "A=%%h$x"


def test_systemd_needs_the_textfile_it_keeps_fresh(tmp_path: Path) -> None:
    res = runner.invoke(app, ["metrics", "--systemd", str(tmp_path)])
    assert res.exit_code == 2 and "--textfile PATH" in res.output, res.output
