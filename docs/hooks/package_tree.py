"""MkDocs hook: the installed layout of the ``raycep`` package as a tree of symbolic links
(build/docs-api/raycep/cep -> cep/, ...; pyproject.toml's package-dir), so mkdocstrings reads
the API reference from the sources as a wheel lays them out."""
from __future__ import annotations

import pathlib
import shutil
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "docs-api"


def on_startup(command, dirty):
    """Before the plugins read their configuration (mkdocstrings checks its paths)."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    if TREE.exists():
        shutil.rmtree(TREE)
    for package, folder in table["package-dir"].items():
        target = TREE.joinpath(*package.split("."))
        if package == "raycep":                 # its own files; sub-packages linked below
            target.mkdir(parents=True)
            for path in (ROOT / folder).iterdir():
                if path.suffix in (".py", ".typed"):
                    (target / path.name).symlink_to(path)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(ROOT / folder, target_is_directory=True)
