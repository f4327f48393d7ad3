"""The documentation: the MkDocs site builds in strict mode, the README stays a short front
page, links between the pages resolve, and no page reads like a development log.

CI runs the README's test command, so this is where a broken docs build is caught.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

README_MAX_LINES = 260

# the README's two set-up commands: what `.ci/run` runs and the main job; they must not drift
SETUP_COMMANDS = [
    "python3 -m pip install -e '.[test]' && raycep demo",
    "python3 -m pip install -e '.[test]' && python3 -m pytest -q",
]

# phrases of a development log, which a reader of the docs cannot place: work sessions
# ("eighth session", not a module such as `spark_ingest/session.py`), issue and seed-file
# numbers instead of names, the checkout's HEAD at the time of a measurement, turns
DEV_LOG = [
    re.compile(r"(?<![\w./])sessions?(?:'s)?\b(?![.\w])", re.I),
    re.compile(r"\bissues?\s+#?\d+", re.I),
    re.compile(r"\bseeds?\s+0\d\d\b", re.I),
    re.compile(r"\bseeds/"),
    re.compile(r"\bHEAD\s+`?[0-9a-f]{7}"),
    re.compile(r"\b(?:last|this|next|previous) turn\b", re.I),
]

# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def relative_links(page: Path) -> list:
    """The relative link targets of a Markdown page (code spans and blocks left out)."""
    text = CODE.sub("", page.read_text(encoding="utf-8"))
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue                          # http:, mailto:, an anchor on the same page
        out.append(target.split("#", 1)[0])
    return out


def test_mkdocs_build_strict(tmp_path):
    """`mkdocs build --strict`: a broken link, a page missing from the build, a docstring
    mkdocstrings cannot render or a module it cannot find fails the build."""
    site = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                          "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    assert (site / "index.html").is_file()
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "Engine" in api and "connect" in api      # the API page has the docstrings


def test_readme_is_a_short_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the details to "
        f"a page under docs/ and link it")


def test_readme_keeps_the_setup_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    for command in SETUP_COMMANDS:
        assert command in lines, f"README.md lost its set-up command: {command}"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert SETUP_COMMANDS[1] in ci


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    missing = [t for t in relative_links(page)
               if t and not (page.parent / t).resolve().exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_development_log(page):
    found = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for pattern in DEV_LOG:
            m = pattern.search(line)
            if m:
                found.append(f"line {number}: {m.group(0)!r} in {line.strip()[:80]!r}")
    assert not found, (f"{page.relative_to(ROOT)} reads like a development log (cite papers by "
                       f"name, figures by command and date):\n" + "\n".join(found))


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The phrases and links the checks exist for are caught (and modules are not)."""
    logged = ["Re-run in the eighth session (HEAD `4388c43`)", "before issue 15",
              "as LimeCEP does (seed 004, sections 4.3-4.4)", "At the session's start",
              "what changed since the last turn"]
    for text in logged:
        assert any(p.search(text) for p in DEV_LOG), text
    fine = ["`spark_ingest/job.py`, `mapping.py`, `session.py`", "spark_ingest.session.start_spark()",
            "a SparkSession", "Kolchinsky & Schuster, VLDB 2018"]
    for text in fine:
        assert not any(p.search(text) for p in DEV_LOG), text
    page = tmp_path / "p.md"
    page.write_text("[a](missing.md) [b](https://x.org) [c](#here) `[d](not-a-link.md)`\n"
                    "![e](img.png \"title\") [f](p.md#top)\n")
    assert relative_links(page) == ["missing.md", "img.png", "p.md"]
