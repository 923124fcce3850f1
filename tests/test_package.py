"""CPU tier: the package is a house a newcomer can walk — rooms named after the book's concepts,
imports that run one way (no module imports a module that imports it back), no module too long
to read in one sitting, and one registry as the only list of kernels."""
import ast
from pathlib import Path

import onlinesoftmax as osm
from onlinesoftmax.runtime.loader import KERNELS_DIR, REPO_ROOT

PACKAGE = REPO_ROOT / "onlinesoftmax"
ROOMS = {"runtime", "kernels", "measure", "book", "distributed", "bench"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every onlinesoftmax module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("onlinesoftmax"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if (PACKAGE.parent / (candidate.replace(".", "/") + ".py")).exists()
                          or (PACKAGE.parent / candidate.replace(".", "/")).is_dir() else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("onlinesoftmax")}
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]):
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_imports_run_one_way():
    edges = graph()
    # the package's __init__ imports everything to register the kernels; nothing may import it back
    edges = {k: {m for m in v if m != "onlinesoftmax"} for k, v in edges.items()}
    assert find_cycle(edges) is None, f"import cycle: {' -> '.join(find_cycle(edges))}"


def test_the_cycle_finder_can_fail():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_rooms_and_module_sizes():
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == ROOMS
    long = {str(p.relative_to(REPO_ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"modules over 400 lines: {long}"


def room_of(module: str) -> str:
    """A subpackage is one room (onlinesoftmax.runtime.*), a kernel family one of its own
    (onlinesoftmax.kernels.attention.*); each top-level module is a room of its own."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["kernels"] and len(parts) > 3 else parts[:2])


def private_uses_across_rooms(path: Path, text: str | None = None, module: str | None = None) -> list[str]:
    """`from onlinesoftmax.X import _name` and `alias._name` (alias an onlinesoftmax module) where X's room
    is not path's own: a private name is for its own room."""
    here = room_of(module or module_name(path))
    tree = ast.parse(path.read_text() if text is None else text)
    aliases, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("onlinesoftmax"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / (full.replace(".", "/") + ".py")).exists() or \
                    (PACKAGE.parent / full.replace(".", "/")).is_dir()
                if is_module:
                    aliases[alias.asname or alias.name] = full
                elif alias.name.startswith("_") and room_of(node.module) != here:
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("onlinesoftmax"):
                    aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "onlinesoftmax"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and node.attr.startswith("_") and not node.attr.startswith("__") \
                and room_of(aliases[node.value.id]) != here:
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_private_name_crosses_a_room():
    offenders = {str(p.relative_to(REPO_ROOT)): uses for p in sorted(PACKAGE.rglob("*.py"))
                 if (uses := private_uses_across_rooms(p))}
    assert not offenders, f"private names used outside their room: {offenders}"


def test_the_private_name_check_can_fail():
    probe = "from onlinesoftmax import api\nfrom onlinesoftmax.checks import _host_rows\napi._fast_path\n"
    found = private_uses_across_rooms(Path("probe.py"), probe, module="onlinesoftmax.kernels.probe")
    assert found == ["2: from onlinesoftmax.checks import _host_rows", "3: api._fast_path"]
    assert private_uses_across_rooms(Path("probe.py"), probe, module="onlinesoftmax.api") == \
        ["2: from onlinesoftmax.checks import _host_rows"]     # api's own private name: its own room


def test_every_kernel_file_is_registered_under_its_stem():
    """The registry is the only list of kernels: every .cu is a registered variant named by its stem,
    and every entry a variant launches starts with that stem."""
    stems = {p.stem for p in KERNELS_DIR.rglob("*.cu")}
    registered = {v.path.stem for v in osm.REGISTRY.values()}
    assert stems == registered, (stems ^ registered)
    for variant in osm.REGISTRY.values():
        assert variant.name == variant.path.stem or variant.defines, variant.name
        for entry in variant.launched_entries:
            assert entry == variant.path.stem or entry.startswith(variant.path.stem + "_"), entry


def test_the_library_never_imports_the_book():
    """The book's helpers use the library; the library (and its tools) never import the book, except the
    benchmarks of the book's own kernels: its exercise solutions, and the first page's kernels (read
    through the page's helper, so the suite times the very text the page shows)."""
    allowed = {"onlinesoftmax.bench.kernel_exercises", "onlinesoftmax.bench.first_kernel"}
    offenders = {name: sorted(m for m in deps if m.startswith("onlinesoftmax.book"))
                 for name, deps in graph().items()
                 if not name.startswith("onlinesoftmax.book") and name not in allowed
                 and any(m.startswith("onlinesoftmax.book") for m in deps)}
    assert not offenders, f"library modules importing the book: {offenders}"


def test_every_chooser_returns_a_choice_with_its_reason():
    """One chooser interface: softmax's, top-k's and attention's variant="auto" each return
    dispatch.Choice(variant, reason)."""
    from onlinesoftmax import attention_api, topk
    from onlinesoftmax.kernels import dispatch

    for choice in (dispatch.choose(4000, 4096, cc=90, sms=132, clusters=True), dispatch.choose_masked(4, 100, cc=90),
                   dispatch.choose_log_softmax(4, 100, cc=90), topk.choose(4000, 32768, 5, sms=132),
                   topk.choose(8, 128256, 20, sms=132), attention_api.choose("bfloat16", 1, 128, cc=90, group=4),
                   attention_api.choose("float32", 300, 64, cc=90)):
        assert isinstance(choice, dispatch.Choice) and choice.variant.name in osm.REGISTRY and choice.reason
