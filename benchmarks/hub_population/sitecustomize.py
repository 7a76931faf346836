"""Benchmark-only stand-in for Hugging Face hub datasets, for benchmarks/hub_population.py.

That script runs each community package offline (HF_HUB_OFFLINE=1) with this folder first on PYTHONPATH, so
Python imports this module at start-up. About half the hub's packages read their rows from the hub with
`datasets.load_dataset`; offline that fails on the first read and nothing after it (vfrl's handling of the
package) would be tested. So when the real `load_dataset` fails to reach the hub, this hands back synthetic rows
instead: every column the string "1" (int() and float() of it work, as does str handling; a chat column a list of
one user message "1"), the columns being those in $HUBPOP_COLUMNS (a JSON list the driver grows from the KeyErrors
the package raises). Each stand-in served is appended to $HUBPOP_STANDIN_LOG (one JSON line), so the driver can say
which packages got stand-in data.

Nothing here is vfrl's: vfrl's src/ never sees this module unless this folder is on the path.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys

ROWS = 8  # enough for -n 1 and for packages that split off a few eval rows
DEFAULT_COLUMNS = ["question", "answer"]  # what a verifiers dataset row is built from when nothing else is read
# columns that hold a conversation on the hub (chat datasets): a list of messages, which packages pass on as a
# prompt; "1" there would only test that vfrl refuses a text prompt in a chat environment
CHAT_COLUMNS = {"messages", "conversations", "conversation", "chat", "dialog", "turns"}


def value(column: str):
    return [{"role": "user", "content": "1"}] if column in CHAT_COLUMNS else "1"


def columns() -> list[str]:
    path = os.environ.get("HUBPOP_COLUMNS")
    try:
        with open(path) as f:
            return json.load(f) or DEFAULT_COLUMNS
    except (TypeError, OSError, ValueError):
        return DEFAULT_COLUMNS


def record(entry: dict) -> None:
    path = os.environ.get("HUBPOP_STANDIN_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def local_and_missing(path, data_files) -> bool:
    """A local file the package names and does not ship: its own fault, not the hub's; no stand-in for it."""
    named = [path] if isinstance(path, str) else []
    if isinstance(data_files, str):
        named.append(data_files)
    elif isinstance(data_files, (list, tuple)):
        named += [f for f in data_files if isinstance(f, str)]
    elif isinstance(data_files, dict):
        for files in data_files.values():
            named += [files] if isinstance(files, str) else [f for f in files if isinstance(f, str)]
    return any(os.path.isabs(p) or p.startswith("./") for p in named if "://" not in p and not os.path.exists(p))


def stand_in(datasets, split, streaming):
    """Rows of "1" in every known column: a Dataset for a split (a list of them for a list of splits), else a
    DatasetDict with the usual split names."""
    data = datasets.Dataset.from_dict({c: [value(c)] * ROWS for c in columns()})
    if streaming:
        data = data.to_iterable_dataset()
    if split is None:
        return datasets.DatasetDict({s: data for s in ("train", "test", "validation")}) if not streaming \
            else datasets.IterableDatasetDict({s: data for s in ("train", "test", "validation")})
    if isinstance(split, (list, tuple)):
        return [data for _ in split]
    return data


def patch(datasets) -> None:
    real = datasets.load_dataset

    def load_dataset(path, name=None, *args, split=None, streaming=False, **kwargs):
        try:
            return real(path, name, *args, split=split, streaming=streaming, **kwargs)
        except Exception as e:  # offline: the hub (or a URL) cannot be reached
            if local_and_missing(path, kwargs.get("data_files")):
                raise
            record({"path": str(path), "name": name, "split": str(split), "columns": columns(),
                    "error": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"})
            return stand_in(datasets, split, streaming)

    load_dataset.__wrapped__ = real
    datasets.load_dataset = load_dataset


class PatchDatasetsOnImport(importlib.abc.MetaPathFinder):
    """Patches `datasets` right after it is imported: importing it here at start-up would cost every process
    (and the ones that never read data) a second or two."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "datasets":
            return None
        sys.meta_path.remove(self)  # find the real one, once
        spec = importlib.util.find_spec("datasets")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if os.environ.get("HUBPOP_COLUMNS"):  # only in the driver's subprocesses
    sys.meta_path.insert(0, PatchDatasetsOnImport())
