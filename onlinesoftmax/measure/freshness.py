"""Data follows the code: which sources a recorded suite measured, and whether they changed since.

A suite file's `meta["sources"]` maps each source it measured to a hash of its contents: the `.cu`
file of every kernel its rows name (a registry key as any row value), the headers those include
(followed transitively, as the loader resolves `#include "..."`), the Python module that builds the
kernel's launch (its plan's module), and `kernels/dispatch.py` when a row ran `variant="auto"`.
`write_results` stores them at measurement time; files recorded before were back-filled from the git
commit their meta names (`python -m onlinesoftmax.measure.freshness --backfill`).

`python -m onlinesoftmax.measure.freshness` lists the newest file of every suite under data/<gpu>/ whose
sources differ now, naming the files (exit 1 if any). `make check-data` (check_data.py) applies the same
hashes to the suites the book cites and is what the CPU tier runs. A file without sources (its commit was
never in this repository's history) counts as stale.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from onlinesoftmax.runtime.loader import REPO_ROOT

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
AUTO_NAMES = ("auto", "fast")
DISPATCH = "onlinesoftmax/kernels/dispatch.py"
MOVED: dict[str, str] = {   # recorded path -> where that source lives now (the family rooms)
    "onlinesoftmax/kernels/softmax_teaching.py": "onlinesoftmax/kernels/softmax/teaching.py",
    "onlinesoftmax/kernels/softmax_masked.py": "onlinesoftmax/kernels/softmax/masked.py",
    "onlinesoftmax/kernels/softmax_fp16.py": "onlinesoftmax/kernels/softmax/fp16.py",
    "onlinesoftmax/kernels/softmax_split_merge.py": "onlinesoftmax/kernels/softmax/split_merge.py",
    "onlinesoftmax/kernels/softmax_fast.py": "onlinesoftmax/kernels/softmax/fast.py",
    "onlinesoftmax/kernels/softmax_fast_configs.py": "onlinesoftmax/kernels/softmax/fast_configs.py",
    "onlinesoftmax/kernels/softmax_fast_models.py": "onlinesoftmax/kernels/softmax/fast_models.py",
    "onlinesoftmax/kernels/log_softmax_registers.py": "onlinesoftmax/kernels/logsumexp/log_softmax_registers.py",
    "onlinesoftmax/kernels/logsumexp_online.py": "onlinesoftmax/kernels/logsumexp/online.py",
    "onlinesoftmax/kernels/logsumexp_state.py": "onlinesoftmax/kernels/logsumexp/state.py",
    "onlinesoftmax/kernels/softmax_topk.py": "onlinesoftmax/kernels/topk/softmax_topk.py",
    "onlinesoftmax/kernels/softmax_topk_moe.py": "onlinesoftmax/kernels/topk/moe.py",
    "onlinesoftmax/kernels/softmax_topk_split.py": "onlinesoftmax/kernels/topk/split.py",
    "onlinesoftmax/kernels/topk_keys.py": "onlinesoftmax/kernels/topk/keys.py",
    "onlinesoftmax/kernels/topk_rows_model.py": "onlinesoftmax/kernels/topk/rows_model.py",
    "onlinesoftmax/kernels/attention_blocked.py": "onlinesoftmax/kernels/attention/blocked.py",
    "onlinesoftmax/kernels/attention_decode_mma.py": "onlinesoftmax/kernels/attention/decode_mma.py",
    "onlinesoftmax/kernels/attention_mma.py": "onlinesoftmax/kernels/attention/mma.py",
    "onlinesoftmax/kernels/mma_fragments.py": "onlinesoftmax/kernels/attention/mma_fragments.py",
}


def _registry():
    from onlinesoftmax.registry import REGISTRY

    return REGISTRY


def kernels_in(rows) -> list[str]:
    """The registry names any row value holds (sorted)."""
    registry = _registry()
    names = {value for row in rows for value in row.values() if isinstance(value, str) and value in registry}
    return sorted(names)


def _includes(rel: str, read) -> list[str]:
    """rel (a path under the repository) and every header it includes, transitively, resolved as the
    loader does: the including file's folder, then kernels/common, then kernels."""
    seen, todo = [], [rel]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        text = read(path)
        if text is None:
            continue
        seen.append(path)
        folder = str(Path(path).parent)
        for name in _INCLUDE.findall(text):
            for base in (folder, "kernels/common", "kernels"):
                candidate = str(Path(base) / name)
                if read(candidate) is not None:
                    todo.append(candidate)
                    break
    return sorted(seen)


def source_files(rows, read) -> list[str]:
    """Every source (repository-relative path) the rows' kernels depend on."""
    registry = _registry()
    files = set()
    for name in kernels_in(rows):
        variant = registry[name]
        files.update(_includes(f"kernels/{variant.file}", read))
        module = getattr(variant.plan, "__module__", "") or ""
        if module.startswith("onlinesoftmax."):
            files.add(module.replace(".", "/") + ".py")
    if any(isinstance(v, str) and v in AUTO_NAMES for row in rows for v in row.values()):
        files.add(DISPATCH)
    for row in rows:   # a row may name more of the package's modules it measured ("modules": [paths])
        files.update(path for path in row.get("modules", ()) if isinstance(path, str) and read(path) is not None)
    return sorted(files)


_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _imports_the_package(node) -> bool:
    import ast

    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "onlinesoftmax"
    return isinstance(node, ast.Import) and all(a.name.split(".")[0] == "onlinesoftmax" for a in node.names)


def current_path(path: str) -> str:
    """Where a recorded source lives now (MOVED: a module moved to its family's room keeps its digest
    when its code is the same: the digest leaves out the package's own imports)."""
    return MOVED.get(path, path)


def _code(path: str, text: str) -> str:
    """What a source compiles to, not how it reads: C++ without comments; Python without docstrings,
    comments and imports of the package's own modules (docstrings and imports found by line number,
    comments by the tokenizer: the same in every Python version); runs of whitespace as one space. A
    comment, a reworded docstring or a module moved to another room does not change what was measured;
    every module that builds a launch is a source of its own."""
    if path.endswith(".py"):
        import ast
        import io
        import tokenize

        drop = set()
        for node in ast.walk(ast.parse(text)):
            if _imports_the_package(node):       # where the package's own modules live is not what ran
                drop.update(range(node.lineno, node.end_lineno + 1))
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
                drop.update(range(body[0].lineno, body[0].end_lineno + 1))
        lines = text.splitlines()
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:               # cut the line where its comment starts
                row, col = token.start
                lines[row - 1] = lines[row - 1][:col]
        text = "\n".join(line for number, line in enumerate(lines, 1) if number not in drop)
    else:
        text = _C_COMMENT.sub(" ", text)
    return " ".join(text.split())


def _digest(text: str, path: str = "") -> str:
    return hashlib.sha256(_code(path, text).encode()).hexdigest()[:16]


def reader_at(root: Path = REPO_ROOT, commit: str | None = None):
    """path -> text (or None): the working tree under root, or the files of a git commit."""
    if commit is None:
        def read(rel):
            path = Path(root) / rel
            return path.read_text() if path.is_file() else None
        return read
    cache = {}

    def read_commit(rel):
        if rel not in cache:
            out = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=root, capture_output=True, text=True)
            cache[rel] = out.stdout if out.returncode == 0 else None
        return cache[rel]
    return read_commit


def source_hashes(rows, read=None) -> dict:
    """{path: hash} of the rows' sources as `read` sees them (default: the working tree)."""
    read = read or reader_at()
    return {path: _digest(read(path), path) for path in source_files(rows, read) if read(path) is not None}


def commit_known(commit: str, root: Path = REPO_ROOT) -> bool:
    sha = str(commit).split("+")[0]
    if not re.fullmatch(r"[0-9a-f]{7,40}", sha):
        return False
    return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=root, capture_output=True).returncode == 0


def newest_files(data_dir: Path) -> dict:
    """suite -> its newest json under data_dir/<gpu>/ (what the book reads)."""
    newest = {}
    for path in sorted(Path(data_dir).glob("*/*.json")):
        suite = f"{path.parent.name}/{path.stem[11:]}"
        newest[suite] = path
    return newest


def stale_suites(root: Path = REPO_ROOT) -> list[dict]:
    """One entry per suite whose newest file measured sources that differ now (or that records none)."""
    read = reader_at(root)
    report = []
    for suite, path in newest_files(Path(root) / "data").items():
        meta = json.loads(path.read_text())["meta"]
        recorded = meta.get("sources")
        entry = {"suite": suite, "file": str(path.relative_to(root)), "historical": meta.get("historical")}
        if recorded is None:
            report.append({**entry, "changed": ["(no sources recorded: " + meta.get("sources_note", "none") + ")"]})
            continue
        recorded = {current_path(p): h for p, h in recorded.items()}
        changed = [p for p, h in sorted(recorded.items()) if read(p) is None or _digest(read(p), p) != h]
        if changed:
            report.append({**entry, "changed": changed})
    return report


def backfill(root: Path = REPO_ROOT) -> list[str]:
    """Add meta["sources"] to every recorded json that has none, from the commit its meta names."""
    done = []
    for path in sorted((Path(root) / "data").glob("*/*.json")):
        data = json.loads(path.read_text())
        meta = data["meta"]
        if "sources" in meta:
            continue
        commit = str(meta.get("git_commit", ""))
        if commit_known(commit, root):
            meta["sources"] = source_hashes(data["rows"], reader_at(root, commit.split("+")[0]))
            if commit.endswith("+dirty"):
                meta["sources_note"] = "hashed at the commit; the tree it ran on had uncommitted changes"
        else:
            meta["sources"] = None
            meta["sources_note"] = f"commit {commit!r} is not in this repository's history"
        path.write_text(json.dumps(data, indent=1) + "\n")
        done.append(str(path.relative_to(root)))
    return done


def rehash(root: Path = REPO_ROOT) -> list[str]:
    """Recompute meta["sources"] of every recorded json from the commit its meta names, for the same
    paths: what to run once after `_code` changes what it leaves out (the code at that commit is what
    ran; only the digest of it changes)."""
    done = []
    for path in sorted((Path(root) / "data").glob("*/*.json")):
        data = json.loads(path.read_text())
        meta = data["meta"]
        commit = str(meta.get("git_commit", ""))
        if not isinstance(meta.get("sources"), dict) or not commit_known(commit, root):
            continue
        read = reader_at(root, commit.split("+")[0])
        fresh = {p: _digest(read(p), p) for p in meta["sources"] if read(p) is not None}
        if fresh != meta["sources"]:
            meta["sources"] = fresh
            path.write_text(json.dumps(data, indent=1) + "\n")
            done.append(str(path.relative_to(root)))
    return done


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[argv.index("--root") + 1]) if "--root" in argv else REPO_ROOT
    if "--backfill" in argv:
        for name in backfill(root):
            print("back-filled", name)
        return 0
    if "--rehash" in argv:
        for name in rehash(root):
            print("re-hashed", name)
        return 0
    report = stale_suites(root)
    stale = [r for r in report if not r["historical"]]
    for r in report:
        label = "historical (the book says so)" if r["historical"] else "STALE"
        print(f"{label}: {r['suite']} ({r['file']}): {', '.join(r['changed'])}")
    if stale:
        print(f"{len(stale)} recorded suite(s) measured code that has changed since: re-record them "
              "(the benchmark that writes each names it in its docstring) or mark them historical.")
        return 1
    print("check-data: every recorded suite measured the code as it is now.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
