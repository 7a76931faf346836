"""Build hook: copy the repository's configs/ and environments/ into the wheel as vfrl/_bundled/.

They stay single-sourced at the repository root (where tests, scripts and the README use them);
`vf-setup` copies them out of the installed package. Everything else is in pyproject.toml.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# vfrl/bundle.py is standard library only: load it by path, before vfrl's dependencies exist
_spec = importlib.util.spec_from_file_location("vfrl_bundle", ROOT / "src" / "vfrl" / "bundle.py")
bundle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bundle)


class BuildPyWithBundle(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # editable installs read the checkout's folders directly
            return
        target = Path(self.build_lib) / "vfrl" / "_bundled"
        for rel in bundle.bundled_files(ROOT):
            self.mkpath(str((target / rel).parent))
            self.copy_file(str(ROOT / rel), str(target / rel), preserve_mode=False)


setup(cmdclass={"build_py": BuildPyWithBundle})
