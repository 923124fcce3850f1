"""CPU tier: the one benchmark command, `python -m onlinesoftmax.bench SUITE [--quick]`, and its table of
suites (onlinesoftmax.bench.SUITES): every suite the book cites can be recorded by name, every suite's
module imports without a GPU, and a wrong name or option is refused with a clear message."""
import importlib
import subprocess
import sys

import pytest

from onlinesoftmax.bench import SUITES
from onlinesoftmax.measure import check_data
from onlinesoftmax.runtime.loader import REPO_ROOT


def run(*args):
    return subprocess.run([sys.executable, "-m", "onlinesoftmax.bench", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO_ROOT)


def test_without_a_suite_it_lists_them_all():
    done = run()
    assert done.returncode == 0, done.stderr
    for name in SUITES:
        assert f"  {name} " in done.stdout, name


def test_a_wrong_name_or_option_is_refused():
    done = run("softmax-fastt")
    assert done.returncode == 2 and "unknown suite 'softmax-fastt'" in done.stderr
    no_quick = next(name for name, suite in SUITES.items() if not suite.quick)
    done = run(no_quick, "--quick")
    assert done.returncode == 2 and f"suite {no_quick!r} has no --quick form" in done.stderr


@pytest.mark.parametrize("name", sorted(SUITES))
def test_each_suite_module_imports_and_names_its_suite(name):
    suite = SUITES[name]
    module = importlib.import_module(f"onlinesoftmax.bench.{suite.module}")
    source = (REPO_ROOT / "onlinesoftmax" / "bench" / f"{suite.module}.py").read_text()
    assert 'if __name__ == "__main__":' in source, f"{suite.module} cannot run as the suite's command"
    assert hasattr(module, "SUITE") or f'"{name}"' in source or name.endswith("-host"), \
        f"{suite.module} never names the suite {name!r} it is listed for"


def test_every_cited_suite_can_be_recorded_by_name():
    texts = check_data.citing_texts(REPO_ROOT)
    recorded = {suite for (_, suite) in check_data.recorded_suites(REPO_ROOT)}
    cited = check_data.cited(recorded, texts, REPO_ROOT)
    historical = check_data.historical(texts)
    missing = [s for s in cited if s not in historical and s.removesuffix("-extended").removesuffix("-quick") not in SUITES]
    assert not missing, f"cited suites without a `python -m onlinesoftmax.bench` name: {missing}"
