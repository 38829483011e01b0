"""Every document the project cites can be opened from a checkout: `*.md` names and `docs/...` paths in code, comments
and documents resolve to files of the repository (and `#anchors` to headings in them), Markdown links resolve, and
nothing cites sections (§) of documents users do not have. Public sources are cited by URL (not checked) or, for a
section, by a name in PUBLIC_SOURCES."""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED_SUFFIXES = {".py", ".md", ".lua", ".ts", ".toml"}
SKIPPED_DIRS = {".git", "node_modules", "__pycache__", "build", "dist", ".venv", ".pytest_cache", ".whl", "runs",
                "out", ".benchmarks", "default_checkpoint"}
# Research notes the code was once written against; they are not part of the repository, so nothing may cite them.
FOREIGN_DOCUMENTS = ("dice-method", "validator-spec", "lsp-protocol", "contracts.md", "ARCHITECTURE.md", "STYLE.md")
# Public sources whose sections (§) may be cited, by the name the citation gives on its line or the line before.
PUBLIC_SOURCES = {"Accuracy and Stability of Numerical Algorithms": "N. J. Higham, SIAM, 2nd ed. 2002"}
# Files the text names on purpose although they are not in the repository (outputs of past runs), with why.
NOT_IN_REPOSITORY = {"cuke_stats.md": "BENCHMARKS.md: a GPU run's report, named as not committed"}

URL = re.compile(r"\b(?:https?|file)://\S+")
MD_MENTION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.md)(?:#([\w-]+))?(?![\w/-])")
DOCS_PATH = re.compile(r"(?<![\w/.-])(docs/[\w./-]*[\w-])(?:#([\w-]+))?")
MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def test_no_file_cites_documents_outside_the_repository():
    problems = Repository(ROOT).citation_problems()
    assert not problems, "\n".join(problems)


def test_markdown_links_resolve():
    problems = Repository(ROOT).link_problems()
    assert not problems, "\n".join(problems)


def test_the_checks_report_foreign_sections_missing_files_and_anchors(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Commit rule\n\nSee [the rule](#commit-rule).\n")
    (tmp_path / "README.md").write_text("[guide](docs/guide.md#commit-rule), [gone](docs/gone.md), [bad](#nowhere)\n")
    (tmp_path / "engine.py").write_text(
        '"""Decoding (dice-method.md §2.3); the rules: docs/guide.md#commit-rule; outputs: stats.md."""\n'
        "# blocks: docs/guide.md#blocks, and notes.md\n"
        '# sums: (Higham, "Accuracy and Stability of Numerical Algorithms", §4.2)\n'
        'REPORT = "stats.md"\n')
    repository = Repository(tmp_path)
    assert sorted(repository.citation_problems()) == sorted([
        "README.md:1: cites docs/gone.md, which is not a file of the repository",
        "engine.py:1: cites a section (§) of a document; cite a file of the repository (docs/…#anchor) or a public URL",
        "engine.py:1: cites dice-method, which users do not have",
        "engine.py:1: cites dice-method.md, which is not a file of the repository",
        "engine.py:2: cites docs/guide.md#blocks, but docs/guide.md has no such heading",
        "engine.py:2: cites notes.md, which is not a file of the repository",
    ])
    assert repository.link_problems() == [
        "README.md:1: link to docs/gone.md, which does not exist",
        "README.md:1: link to #nowhere, which is no heading of this file",
    ]


def test_scan_covers_the_code_and_the_documents():
    names = {f.relative_to(ROOT).as_posix() for f in Repository(ROOT).files}
    assert {"README.md", "docs/README.md", "model/engine.py", "server/PROTOCOL.md",
            "tests/cheats/manifest.toml"} <= names
    assert not any(n.startswith("model/default_checkpoint/") or "node_modules" in n for n in names)
    assert "tests/test_docs_references.py" not in names  # it names the foreign documents to forbid them


def test_slug_follows_github_anchors():
    assert slug("Commit rule") == "commit-rule"
    assert slug("Block-diffusion SFT") == "block-diffusion-sft"
    assert slug("`step_map` and stats") == "step_map-and-stats"


class Repository:
    """The scanned files of a checkout and the citations in them."""

    def __init__(self, root: Path):
        self.root = root
        self.files = self._scanned_files()

    def citation_problems(self) -> list[str]:
        """`file:line: what is wrong` for every citation that cannot be followed."""
        problems, data_names, places_by_file = [], set(NOT_IN_REPOSITORY), {}
        for path in self.files:
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            for number, line in enumerate(lines, 1):
                where = f"{self._name(path)}:{number}"
                if "§" in line and not any(s in " ".join(lines[max(0, number - 2):number]) for s in PUBLIC_SOURCES):
                    problems.append(f"{where}: cites a section (§) of a document; cite a file of the repository "
                                    f"(docs/…#anchor) or a public URL")
                problems += [f"{where}: cites {name}, which users do not have" for name in FOREIGN_DOCUMENTS
                             if name in line]
                for match in DOCS_PATH.finditer(URL.sub(" ", line)):  # a docs/ path is a citation wherever it is
                    problems += self._citation(match.group(1), match.group(2), self.root, where)
            if path.suffix == ".py":
                places, names = python_places(text)
                data_names |= names
            else:
                places = list(enumerate(text.splitlines(), 1))
            places_by_file[path] = places
        for path, places in places_by_file.items():
            for number, line in places:
                for match in MD_MENTION.finditer(URL.sub(" ", line)):
                    mention, anchor = match.groups()
                    if mention.startswith("docs/"):
                        continue  # checked above
                    if self.resolve(mention, path.parent) is None and Path(mention).name in data_names:
                        continue  # a file the code writes or reads (stats.md, report.md), not a document
                    problems += self._citation(mention, anchor, path.parent, f"{self._name(path)}:{number}")
        return problems

    def link_problems(self) -> list[str]:
        """`file:line: what is wrong` for every relative Markdown link whose file or heading is missing."""
        problems = []
        for markdown in (f for f in self.files if f.suffix == ".md"):
            for number, line in enumerate(markdown.read_text(encoding="utf-8").splitlines(), 1):
                for match in MD_LINK.finditer(line):
                    target = match.group(1)
                    if re.match(r"[a-z]+:", target):
                        continue  # a URL
                    path, _, anchor = target.partition("#")
                    where = f"{self._name(markdown)}:{number}"
                    resolved = (markdown.parent / path).resolve() if path else markdown
                    if not resolved.exists():
                        problems.append(f"{where}: link to {path}, which does not exist")
                    elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                        problems.append(f"{where}: link to {path}#{anchor}, which is no heading "
                                        f"{'there' if path else 'of this file'}")
        return problems

    def resolve(self, mention: str, base: Path) -> Path | None:
        """The file a mention names: relative to `base` (the citing file's folder), to the root, or (a bare name)
        the one scanned file with that name."""
        for folder in (base, self.root):
            candidate = (folder / mention).resolve()
            if candidate.is_file() and self.root.resolve() in candidate.parents:
                return candidate
        same_name = [f for f in self.files if f.name == mention] if "/" not in mention else []
        return same_name[0] if len(same_name) == 1 else None

    def _citation(self, mention: str, anchor: str | None, base: Path, where: str) -> list[str]:
        target = self.resolve(mention, base)
        if target is None:
            return [f"{where}: cites {mention}, which is not a file of the repository"]
        if anchor and target.suffix == ".md" and anchor not in anchors(target):
            return [f"{where}: cites {mention}#{anchor}, but {self._name(target)} has no such heading"]
        return []

    def _name(self, path: Path) -> str:
        return path.resolve().relative_to(self.root.resolve()).as_posix()

    def _scanned_files(self) -> list[Path]:
        found = []
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
            for name in sorted(names):
                path = Path(folder, name)
                if path.suffix in SCANNED_SUFFIXES and path.resolve() != Path(__file__).resolve():
                    found.append(path)
        return found


def python_places(source: str) -> tuple[list[tuple[int, str]], set[str]]:
    """(lines of comments and docstrings, where citations live; `.md` names in other string literals, which are
    file names the code reads or writes, not citations)."""
    if ".md" not in source:
        return [], set()
    docstrings, strings = set(), []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ".md" in node.value:
            strings.append(node)
    places, data_names = [], set()
    for node in strings:
        if id(node) in docstrings:
            places += [(node.lineno + i, line) for i, line in enumerate(node.value.splitlines())]
        else:
            data_names |= {Path(m.group(1)).name for m in MD_MENTION.finditer(URL.sub(" ", node.value))}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            places.append((token.start[0], token.string))
    return places, data_names


@functools.lru_cache(maxsize=None)
def anchors(markdown: Path) -> frozenset[str]:
    """The anchors of a Markdown file's headings (fenced code skipped)."""
    found, fenced = set(), False
    for line in markdown.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.add(slug(match.group(2)))
    return frozenset(found)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
