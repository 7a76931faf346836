"""Do verifiers' classic environment packages port to vfrl by changing the import?

    python benchmarks/verifiers_port_check.py /tmp/vfclassic/environments [--vfrl-src DIR] [--deps DIR]

ENV_DIR is a folder of classic environment packages: the `environments/` folder of verifiers' last commit with
the classic API (git archive it from github.com/PrimeIntellect-ai/verifiers), or the community's
(prime-environments); nothing of them is kept here. Each package folder (its module `<name>.py`, a `<name>/`
package, or its one top-level module) is copied to a temp dir, `verifiers` is swapped for `vfrl` in its imports, and in
a subprocess of its own (offline: HF_HUB_OFFLINE=1) it is imported and `load_environment()` is
called. With --unchanged nothing is swapped: the package is loaded as it is written, by
`vfrl.load_environment(name)` (as vf-train loads it). A package that loads is then scored on fixed rollouts
(below), whose expected rewards are what verifiers' code gives them; judge models are answered by a fake OpenAI
client. Its datasets are built too, to tell which need the network.

--vfrl-src puts another vfrl source tree first (to measure an older commit); --deps adds a folder of
extra packages after site-packages (e.g. `pip install --target DIR datasets`, which most packages
import at the top): it supplies what the venv lacks and replaces nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SWAPS = [(r"^(\s*)import verifiers as vf\b", r"\1import vfrl as vf"),
         (r"^(\s*)from verifiers(\.|\s)", r"\1from vfrl\2"),
         (r"^(\s*)import verifiers\s*$", r"\1import vfrl as verifiers")]

A = {"role": "assistant"}


def msgs(*turns: tuple[str, str]) -> list[dict]:
    return [{"role": r, "content": c} for r, c in turns]


# package -> (load kwargs, [(row, completion, expected reward under verifiers, judge reply or None)])
CASES = {
    "reverse_text": ({}, [
        ({"prompt": msgs(("user", "hello")), "answer": "olleh"},
         msgs(("assistant", "<reversed_text>olleh</reversed_text>")), 1.0, None),
        ({"prompt": msgs(("user", "hello")), "answer": "olleh"}, msgs(("assistant", "no tags")), 0.0, None),
    ]),
    "gsm8k": ({}, [
        ({"prompt": msgs(("user", "6*7?")), "answer": "42"}, msgs(("assistant", "so \\boxed{42}")), 1.0, None),
        ({"prompt": msgs(("user", "6*7?")), "answer": 42}, msgs(("assistant", "so \\boxed{42}")), 1.0, None),
        ({"prompt": msgs(("user", "6*7?")), "answer": "42"}, msgs(("assistant", "42")), 0.0, None),
    ]),
    "doublecheck": ({}, [
        ({"prompt": msgs(("user", "1+2?")), "answer": "3"},
         msgs(("assistant", "\\boxed{3}"), ("user", "Are you sure?"), ("assistant", "yes, \\boxed{3}")), 1.0, None),
    ]),
    "math_group": ({}, [
        ({"prompt": msgs(("user", "1+6?")), "answer": "7", "task": "gsm8k"},
         msgs(("assistant", "\\boxed{7}")), 1.0, None),
        ({"prompt": msgs(("user", "1+6?")), "answer": "7", "task": "math"},
         msgs(("assistant", "\\boxed{7}")), 1.2, None),
    ]),
    "mmmu": ({}, [
        ({"prompt": msgs(("user", "A or B?")), "answer": "A"}, msgs(("assistant", "\\boxed{A}")), 1.0, None),
    ]),
    "tool_test": ({}, [
        ({"prompt": msgs(("user", "call")), "info": {"tool_names": ["tool_A", "tool_B"]}},
         [{**A, "content": "", "tool_calls": [
             {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": '{"x": 1}'}}
             for i, n in enumerate(["tool_B", "tool_A"])]}], 1.0, None),
    ]),
    "alphabet_sort": ({}, [
        ({"prompt": msgs(("user", "sort")), "info": {"num_turns": 1, "ground_truths": [["AdaLovelace", "AlanTuring"]],
                                                     "follow_ups": [], "turn_names": [], "sort_by_first": True}},
         msgs(("assistant", "<alphabetical_sorted>\nAdaLovelace\nAlanTuring\n</alphabetical_sorted>")), 1.0, None),
    ]),
    "sentence_repeater": ({}, [
        ({"prompt": msgs(("user", "q1")), "info": {"questions": ["q1", "q2"], "answers": ["a one", "a two"]}},
         msgs(("assistant", "a one"), ("user", "q2"), ("assistant", "a two")), 1.0, None),
    ]),
    "toxicity_explanation": ({}, [
        ({"prompt": msgs(("user", "text")), "answer": "toxic"}, msgs(("assistant", "toxic, because")), 0.7, "7"),
    ]),
    # verifiers' JudgeRubric has no reward function of its own: this package scores 0 there
    "self_reward": ({}, [
        ({"prompt": msgs(("user", "q")), "answer": "a"}, msgs(("assistant", "a")), 0.0, "1.0"),
    ]),
    "browser_dom_example": ({"project_id": "p"}, []),
    "reasoning_gym_env": ({"gym": "leg_counting", "num_train_examples": 4, "num_eval_examples": 2}, "own-answers"),
}

CHILD = r'''
import asyncio, json, os, sys
# after site-packages: the extra folder supplies what the venv lacks, never replaces what it has
sys.path += [p for p in os.environ.get("PORT_CHECK_DEPS", "").split(os.pathsep) if p]
ROW_DEFAULTS = {"answer": "", "info": {}, "task": "default"}
out = {"load": None}
judge_reply = {"text": ""}

class _Judge:  # stands in for openai.AsyncOpenAI: every judge call gets the case's reply
    def __init__(self, *a, **k):
        async def create(**kw):
            msg = type("M", (), {"content": judge_reply["text"]})
            return type("R", (), {"choices": [type("C", (), {"message": msg})]})
        self.chat = type("Chat", (), {"completions": type("Comp", (), {"create": staticmethod(create)})})

import openai
openai.AsyncOpenAI = _Judge

def line(e):
    return (type(e).__name__ + ": " + " ".join(str(e).split()))[:300]

name, kwargs, cases, unchanged = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4] == "1"
try:
    import importlib
    import vfrl
    if unchanged:  # as vf-train loads it: vfrl's loader reads a classic package's verifiers imports as vfrl's
        try:
            env = vfrl.load_environment(name, **kwargs)
        except vfrl.envs.loader.EnvironmentLoadError as wrapped:
            raise (wrapped.__cause__ or wrapped)
    else:
        mod = importlib.import_module(name)
        env = mod.load_environment(**kwargs)
    if not isinstance(env, vfrl.Environment):
        raise TypeError(f"load_environment() returned {type(env).__name__}")
    out["load"] = "ok"
except BaseException as e:
    out["load"] = "error"
    out["error"] = line(e)
    out["error_type"] = type(e).__name__
    out["missing_module"] = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
    print(json.dumps(out)); sys.exit(0)

try:
    n = len(env.dataset or env.eval_dataset or [])
    out["data"] = f"ok ({n} rows)"
    rows = env.dataset
except BaseException as e:
    out["data"] = line(e)
    rows = []

if cases == "own-answers":  # the dataset's own answer as the reply: full marks
    cases = [({"prompt": r["prompt"], "answer": r["answer"], "info": r["info"], "task": r["task"]},
              [{"role": "assistant", "content": "<answer>" + str(r["answer"]) + "</answer>"}], 1.0, None)
             for r in rows[:4]]

from vfrl.rollout_types import Rollout
out["scores"] = []
for row, completion, expected, judge in cases:
    row = {**ROW_DEFAULTS, **row}
    judge_reply["text"] = judge or ""
    n_turns = sum(m["role"] == "assistant" for m in completion)
    state = {"prompt": row["prompt"], "completion": completion, "answer": row["answer"], "info": row["info"],
             "task": row["task"], "input": row, "turn": n_turns, "truncated": False,
             "trajectory": [{"prompt": [], "completion": [m], "is_truncated": False}
                            for m in completion if m["role"] == "assistant"]}
    r = Rollout(example_id=0, prompt=row["prompt"], completion=completion, answer=row["answer"], prompt_ids=[],
                completion_ids=[], completion_logprobs=[], completion_mask=[], policy="m", task=row["task"],
                info=row["info"])
    try:
        r = asyncio.run(env.score(r, state))
        got, why = r.reward, "; ".join(f"{k}: {v}" for k, v in (r.reward_errors or {}).items())
    except BaseException as e:
        got, why = None, line(e)
    out["scores"].append({"expected": expected, "got": got, "why": why[:200]})
print(json.dumps(out))
'''


def port(src: Path, dst: Path, unchanged: bool) -> None:
    shutil.copytree(src, dst)
    for py in [] if unchanged else dst.rglob("*.py"):
        text = py.read_text()
        for pattern, repl in SWAPS:
            text = re.sub(pattern, repl, text, flags=re.M)
        py.write_text(text)


def module_of(folder: Path) -> str | None:
    """The environment module a package folder holds: `<folder>.py`, a `<folder>/` package, or its one top-level
    module (`tau_bench/tau_bench_env.py`); None when it has none of these."""
    if (folder / f"{folder.name}.py").is_file() or (folder / folder.name / "__init__.py").is_file():
        return folder.name
    modules = [p.stem for p in folder.glob("*.py") if not p.name.startswith(("test_", "_"))]
    return modules[0] if len(modules) == 1 else None


def is_v1(folder: Path) -> bool:
    """A verifiers 0.4 package (it imports verifiers.v1): not the classic API this script checks."""
    from vfrl.verifiers_compat import IMPORTS_V1

    return any(IMPORTS_V1.search(p.read_text(errors="replace")) for p in folder.rglob("*.py"))


def as_site_packages(folder: Path, parent: Path) -> Path:
    """`folder` reached through a path named site-packages (a link to it): dill, which `datasets` hashes its tables
    and functions with, pickles a module found anywhere else by value, and pyarrow's by value fails
    (`PicklingError: Can't pickle <class 'MonthDayNano'>`); installed in a venv, the same packages work."""
    link = parent / "site-packages"
    parent.mkdir(parents=True)
    link.symlink_to(folder.resolve(), target_is_directory=True)
    return link


def check(pkg: Path, work: Path, pythonpath: list[str], deps: list[str], timeout: float, unchanged: bool) -> dict:
    name = module_of(pkg)
    port(pkg, work / pkg.name, unchanged)
    kwargs, cases = CASES.get(name, ({}, []))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(work / pkg.name), *pythonpath]),
           "PORT_CHECK_DEPS": os.pathsep.join(deps)}
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, name, json.dumps(kwargs), json.dumps(cases),
                               str(int(unchanged))],
                              capture_output=True, text=True, timeout=timeout, env=env, cwd=work)
    except subprocess.TimeoutExpired:
        return {"load": "error", "error": f"timed out after {timeout:g}s", "error_type": "Timeout"}
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        return json.loads(last[0])
    except json.JSONDecodeError:
        return {"load": "error", "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300],
                "error_type": "Crash"}


def verdict(result: dict) -> str:
    """One word for the table: loaded and scored as verifiers, wrong, a classic name vfrl lacks, needs the network or
    a key, unsupported service, missing dependency, error."""
    if result["load"] != "ok":
        from vfrl.envs.loader import hosted_service

        if hosted_service(str(result.get("missing_module"))):
            return "unsupported"  # a verifiers module that runs in a service vfrl does not run, refused in one line
        if re.search(r"vfrl does not have|No module named 'vfrl\.|from 'vfrl\.|module 'vfrl' has no attribute",
                     result.get("error", "")):
            return "vfrl-lacks"  # a classic module path or name vfrl does not provide
        if re.search(r"Hub|OfflineMode|ConnectionError|URLError|Name or service not known|api[_ ]key|API_KEY|"
                     r"[Cc]lon(e|ing)|Failed to fetch|Unable to find 'https?:|Failed to load element",
                     result.get("error", "")):
            return "needs-network-or-key"  # its data or judge is online (these runs are offline, keyless)
        if result.get("error_type") == "NotImplementedError":
            return "unsupported"  # a class or mode vfrl says, in one line, that it does not provide
        if result.get("missing_module") and not str(result["missing_module"]).startswith(("vfrl", "verifiers")):
            return "needs-dependency"
        return "load-error"
    scores = result.get("scores") or []
    if not scores:
        return "loaded"
    ok = all(s["got"] is not None and abs(s["got"] - s["expected"]) < 1e-6 for s in scores)
    return "scores-as-verifiers" if ok else "scores-wrong"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("env_dir", type=Path)
    ap.add_argument("--vfrl-src", type=Path, help="a vfrl src/ folder to put first on the path")
    ap.add_argument("--deps", type=Path, action="append", default=[], help="extra package folder(s) on the path")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path, help="write the full results here")
    ap.add_argument("--unchanged", action="store_true",
                    help="load each package as it is, through vfrl.load_environment (no import swap)")
    args = ap.parse_args()
    packages = sorted(p for p in args.env_dir.iterdir() if p.is_dir() and module_of(p) and not is_v1(p))
    pythonpath = [str(args.vfrl_src)] if args.vfrl_src else []
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        deps = [str(as_site_packages(d, Path(tmp) / f"deps{i}")) for i, d in enumerate(args.deps)]
        for pkg in packages:
            results[pkg.name] = r = check(pkg, Path(tmp), pythonpath, deps, args.timeout, args.unchanged)
            r["verdict"] = verdict(r)
            detail = r.get("error") or "; ".join(
                f"{s['got']} (verifiers {s['expected']}){' ' + s['why'] if s['why'] else ''}"
                for s in r.get("scores", []))
            data = f" | data: {r['data']}" if "data" in r else ""
            print(f"{pkg.name:22} {r['verdict']:20} {detail[:160]}{data[:120]}")
    counts: dict[str, int] = {}
    for r in results.values():
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    loaded = sum(r["load"] == "ok" for r in results.values())
    print(f"\n{loaded}/{len(results)} load; " + ", ".join(f"{v}: {n}" for v, n in sorted(counts.items())))
    print("datasets built offline: " + str(sum(str(r.get("data", "")).startswith("ok") for r in results.values())))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
