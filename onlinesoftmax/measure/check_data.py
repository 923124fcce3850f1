"""Does the data the book cites still measure the code? `python -m onlinesoftmax.measure.check_data`.

A suite is cited when its name appears in a chapter (``chapters/*.md``) or a book module
(``onlinesoftmax/book/**/*.py``) as a whole word (``load_recorded("split-merge")``, prose naming it).
The ``softmax-topk`` suites are the exception: `topk_figures` reads its full run, or else its quick
run with the per-case runs newer than it, so those count as cited when its loaders read them.
Only the newest file of a cited suite counts: it is what `results.load_recorded` gives the book.

That file is current when the hashes in its meta (``meta["sources"]``, written by `write_results`
through `freshness.source_hashes`) equal the hashes of the same files now, and the kernels its rows
name are built from no source it did not record.
It is stale otherwise (the changed files are named), and unverifiable when its meta has no hashes
(``"sources": null`` with a ``sources_note``: the commit it names is not in this history).

A chapter may cite a suite as a record of an earlier version of the code (attempts since rewritten
or removed) by writing, in the chapter or book module that cites it, a line holding
``historical-suite: <suite>`` (in a comment or a hidden cell) next to prose that says so to the
reader (a file whose meta says ``"historical"`` counts the same). Such a suite is reported as
historical and does not fail the check; an unmarked stale or unverifiable suite fails it (exit
status 1). `python -m onlinesoftmax.measure.freshness` lists every recorded suite, cited or not.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from onlinesoftmax.measure import freshness
from onlinesoftmax.runtime.loader import REPO_ROOT

HISTORICAL = re.compile(r"historical-suite:\s*([a-z0-9][a-z0-9-]*)")


def citing_texts(root: Path = REPO_ROOT) -> dict[str, str]:
    """{repository path: text} of every chapter and book module."""
    files = sorted((root / "chapters").glob("*.md")) + sorted((root / "onlinesoftmax" / "book").rglob("*.py"))
    return {str(f.relative_to(root)): f.read_text() for f in files}


# Book modules that build the names of the suites they read at run time, and read some only when
# others are absent or older: the suites under each prefix count as cited exactly when the module's
# own loaders read them (traced below), and never by a mention in a docstring.
TRACED = {"softmax-topk": ("onlinesoftmax.book.readings.topk_figures", ("load", "load_host"))}


def traced_suites(root: Path = REPO_ROOT) -> dict[str, list[str]]:
    """{suite: [module]} of the suites the TRACED modules' loaders read from `root`/data."""
    import importlib

    from onlinesoftmax.measure import results

    read: dict[str, list[str]] = {}
    saved = results.DATA_DIR, results.load_recorded

    def load_recorded(suite, gpu="h200"):
        read.setdefault(suite, [module_path])
        files = results.recorded_files(suite, gpu)
        data = json.loads(files[-1].read_text())
        data["path"] = str(files[-1].relative_to(root))
        return data

    results.DATA_DIR, results.load_recorded = root / "data", load_recorded
    try:
        for module_name, loaders in TRACED.values():
            module = importlib.import_module(module_name)
            module_path = module_name.replace(".", "/") + ".py"
            for loader in loaders:
                getattr(module, loader)()
    finally:
        results.DATA_DIR, results.load_recorded = saved
    return read


def recorded_suites(root: Path = REPO_ROOT) -> dict[str, Path]:
    """{(gpu folder, suite): newest file} of everything under data/."""
    newest: dict[str, Path] = {}
    for file in sorted((root / "data").glob("*/*.json")):
        suite = file.name[11:-5]
        newest[(file.parent.name, suite)] = file      # sorted: the last is the newest
    return newest


def cited(suites, texts: dict[str, str], root: Path = REPO_ROOT) -> dict[str, list[str]]:
    """{suite: [paths citing it]} for the suites among `suites` that a text names or a traced loader reads."""
    out: dict[str, list[str]] = {}
    traced = traced_suites(root)
    for suite in suites:
        if any(suite == prefix or suite.startswith(prefix + "-") for prefix in TRACED):
            if suite in traced:
                out[suite] = traced[suite]
            continue
        word = re.compile(r"(?<![\w-])" + re.escape(suite) + r"(?![\w-])")
        where = [path for path, text in texts.items() if word.search(text)]
        if where:
            out[suite] = where
    return out


def historical(texts: dict[str, str]) -> dict[str, list[str]]:
    marks: dict[str, list[str]] = {}
    for path, text in texts.items():
        for suite in HISTORICAL.findall(text):
            marks.setdefault(suite, []).append(path)
    return marks


@dataclass
class Verdict:
    suite: str
    file: str
    status: str                     # "current", "stale", "unverifiable"
    changed: list[str] = field(default_factory=list)
    note: str = ""
    historical: bool = False
    cited_by: list[str] = field(default_factory=list)

    @property
    def fails(self) -> bool:
        return self.status != "current" and not self.historical


def verdict(file: Path, root: Path = REPO_ROOT) -> Verdict:
    """Compare the file's recorded hashes with the same sources now, and with the sources its rows'
    kernels are built from now (a header newly included counts as a change)."""
    data = json.loads(file.read_text())
    meta = data.get("meta", {})
    rel = str(file.relative_to(root))
    suite = file.name[11:-5]
    recorded = meta.get("sources")
    if recorded is None:
        return Verdict(suite, rel, "unverifiable",
                       note=meta.get("sources_note", "no source hashes recorded"))
    read = freshness.reader_at(root)
    recorded = {freshness.current_path(p): h for p, h in recorded.items()}
    changed = []
    for path in sorted(set(recorded) | set(freshness.source_files(data.get("rows", []), read))):
        text = read(path)
        if path not in recorded:
            changed.append(f"{path} (a source not recorded then)")
        elif text is None:
            changed.append(f"{path} (removed since)")
        elif freshness._digest(text, path) != recorded[path]:
            changed.append(path)
    return Verdict(suite, rel, "stale" if changed else "current", changed)


def check(root: Path = REPO_ROOT, gpu: str | None = None) -> list[Verdict]:
    """A verdict for the newest file of every cited suite."""
    texts = citing_texts(root)
    newest = recorded_suites(root)
    cites = cited({suite for _, suite in newest}, texts, root)
    marks = historical(texts)
    verdicts = []
    for (folder, suite), file in sorted(newest.items()):
        if suite not in cites or (gpu and folder != gpu):
            continue
        v = verdict(file, root)
        v.cited_by = cites[suite]
        v.historical = suite in marks or bool(json.loads(file.read_text())["meta"].get("historical"))
        verdicts.append(v)
    return verdicts


def report(verdicts: list[Verdict]) -> tuple[str, int]:
    lines = []
    for v in verdicts:
        label = v.status + (" (cited as historical)" if v.historical and v.status != "current" else "")
        lines.append(f"{label:12} {v.file}  [cited by {', '.join(v.cited_by)}]")
        for path in v.changed:
            lines.append(f"{'':12}   changed since recorded: {path}")
        if v.note:
            lines.append(f"{'':12}   {v.note}")
    failing = [v for v in verdicts if v.fails]
    if failing:
        lines.append(f"check-data: {len(failing)} of {len(verdicts)} cited suites measure code that has "
                     "changed or cannot be verified: re-record them (or mark them historical in the citing page)")
    else:
        lines.append(f"check-data: all {len(verdicts)} cited suites are current")
    return "\n".join(lines), 1 if failing else 0


def main(argv=None) -> int:
    text, status = report(check())
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
