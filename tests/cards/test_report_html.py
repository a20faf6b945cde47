"""The card's HTML page: self-contained, the receipts' verdict and figures in its DOM, rendered by headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gb300lane.cards import load_card, register, render_report, rescore, run_card, score
from gb300lane.cards.present.report import ratio_rows
from gb300lane.cards.record.receipts import Receipts, read_verdict
from gb300lane.cli.main import app
from gb300lane.fsio import sha256_file

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"
runner = CliRunner()


@pytest.fixture
def receipts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Receipts:
    """A tested card run on the fake lane (B 3% better), scored, then re-scored with a reason."""
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    card, p = load_card(DATA / "tested.yaml")
    rec = register(card, p.read_text())
    run_card(rec, ops=fakes.FakeLane(card, {"B": 1.03}, tps={"B": 1.03}, noise=0.03, n_transcripts=20).ops())
    score(rec)
    rescore(rec, "the no-loss margin was registered tighter than the lane's own noise", ["decode-no-loss.margin=0.04"])
    return rec


class _DOM(HTMLParser):
    """Elements with their attributes and text, flat."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[dict] = []
        self._open: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        el = {"tag": tag, "attrs": dict(attrs), "text": ""}
        self.elements.append(el)
        if tag not in ("meta", "br", "img", "input", "link"):
            self._open.append(el)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i]["tag"] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        for el in self._open:
            el["text"] += data

    def find(self, **attrs: str) -> list[dict]:
        return [e for e in self.elements if all(e["attrs"].get(k) == v for k, v in attrs.items())]


def _dom(text: str) -> _DOM:
    d = _DOM()
    d.feed(text)
    return d


def _check_against_receipts(dom: _DOM, rec: Receipts) -> None:
    """The verdict, every gate's status and tested figures, B / ctrl and the hashes are the receipts' own."""
    n = rec.verdict_numbers()[-1]
    v = read_verdict(rec, n)
    (box,) = dom.find(id="verdict")
    assert box["attrs"]["data-verdict"] == v.verdict and box["attrs"]["data-number"] == str(n)
    assert v.verdict in box["text"]
    section = [e for e in dom.find(id=f"verdict-{n}")]
    assert section and section[0]["attrs"]["data-verdict"] == v.verdict
    for g in v.results:
        (row,) = [e for e in dom.find(**{"class": "gate", "data-gate": g.id}) if e["attrs"].get("data-status")][:1] or [
            None
        ]
        assert row is not None and row["attrs"]["data-status"] == g.status, g.id
        tests = dom.find(**{"data-gate": g.id})
        tests = [e for e in tests if e["attrs"].get("class", "").startswith("test")]
        assert len(tests) >= len(g.tests)  # the page shows the reported verdict and any earlier ones
        for t, el in zip(g.tests, tests):
            cells = {
                c["attrs"].get("data-field"): c for c in dom.elements if c["tag"] == "td" and c in _children(dom, el)
            }
            assert float(cells["estimate"]["attrs"]["data-value"]) == t.estimate
            assert float(cells["interval"]["attrs"]["data-low"]) == t.low
            assert float(cells["interval"]["attrs"]["data-high"]) == t.high
            assert float(cells["margin"]["attrs"]["data-value"]) == t.margin
            assert cells["decision"]["attrs"]["data-value"] == t.decision
            assert f"{t.estimate:+.2%}" in cells["estimate"]["text"]
    card = rec.card()
    rows = ratio_rows(card, rec.load_arms(card))
    assert rows
    for r in rows:
        (tr,) = dom.find(**{"class": "ratio", "data-class": r.cls, "data-concurrency": str(r.concurrency)})
        (ratio,) = [c for c in _children(dom, tr) if c["attrs"].get("data-field") == "ratio"]
        assert float(ratio["attrs"]["data-value"]) == r.ratio and f"{r.ratio:.3f}" in ratio["text"]
    reason = dom.find(**{"class": "rescore", "data-previous": "1"})
    assert reason and "tighter than the lane's own noise" in reason[0]["text"]
    digest = sha256_file(rec.verdict_file(n))
    assert dom.find(**{"data-key": f"verdicts/verdict-{n}.json", "data-sha256": digest})
    reg = rec.registration()
    assert dom.find(**{"data-key": "gates_sha256", "data-sha256": reg.gates_sha256})


def _children(dom: _DOM, parent: dict) -> list[dict]:
    """Elements between `parent` and the next element of the same tag (a table row's cells)."""
    i = dom.elements.index(parent)
    out = []
    for e in dom.elements[i + 1 :]:
        if e["tag"] == parent["tag"]:
            break
        out.append(e)
    return out


@pytest.mark.slow
def test_report_writes_a_self_contained_page_with_the_receipts_numbers(receipts: Receipts) -> None:
    res = runner.invoke(app, ["card", "report", str(receipts.root)])
    assert res.exit_code == 0, res.output
    page = receipts.report_dir(2) / "card.html"
    assert f"page: {page}" in res.output.replace("\n", "")
    text = page.read_text()
    # nothing fetched: no scripts, no stylesheets or images by reference, url() only to the page's own ids
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\((?!#)", text, re.I)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text, re.I)
    assert text.count("<svg") == 3 and "accepted at position" in text  # figures inline, text kept as text
    assert '<meta name="viewport"' in text and "@media print" in text
    _check_against_receipts(_dom(text), receipts)
    manifest = json.loads((receipts.root / "manifest-report-2.json").read_text())
    assert manifest["files"]["report/verdict-2/card.html"] == sha256_file(page)
    again = runner.invoke(app, ["card", "report", str(receipts.root), "--html"])
    assert again.exit_code == 1 and "already exists" in again.output


@pytest.mark.slow
def test_html_flag_writes_the_page_alone_beside_an_earlier_markdown_report(receipts: Receipts) -> None:
    md = render_report(receipts, html=False)
    assert not (md.parent / "card.html").exists()
    res = runner.invoke(app, ["card", "report", str(receipts.root), "--html"])
    assert res.exit_code == 0, res.output
    assert (md.parent / "card.html").is_file() and "page:" in res.output
    assert receipts.verify_manifest("manifest-report-2-html.json") == []
    _check_against_receipts(_dom((md.parent / "card.html").read_text()), receipts)


@pytest.mark.chromium
@pytest.mark.timeout(300)
def test_headless_chromium_renders_the_page_non_blank_with_the_verdict_in_its_dom(
    receipts: Receipts, tmp_path: Path
) -> None:
    from PIL import Image

    res = runner.invoke(app, ["card", "report", str(receipts.root), "--html"])
    assert res.exit_code == 0, res.output
    page = receipts.report_dir(2) / "card.html"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    base = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        # a laptop's width; anything the page tried to fetch from the network would fail here
        "--window-size=1366,3000",
        "--proxy-server=127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>",
    ]
    shot = tmp_path / "card.png"
    run = subprocess.run([*base, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=240)
    assert shot.is_file(), run.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.shape[1] == 1366
    assert pixels.var() > 100, f"screenshot looks blank (pixel variance {pixels.var():.1f})"
    assert (pixels < 128).mean() > 0.005  # some ink: text, tables, figure lines
    dump = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=240)
    assert dump.returncode == 0 and "<html" in dump.stdout, dump.stderr[-2000:]
    _check_against_receipts(_dom(dump.stdout), receipts)
