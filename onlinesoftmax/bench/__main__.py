"""python -m onlinesoftmax.bench SUITE [--quick] [more arguments for the suite's module]"""
from __future__ import annotations

import os
import runpy
import sys

from onlinesoftmax.bench import SUITES


def usage() -> str:
    width = max(map(len, SUITES))
    return "usage: python -m onlinesoftmax.bench SUITE [--quick] [arguments]\n\nsuites:\n" + "\n".join(
        f"  {name:{width}}  {suite.about}{'' if suite.quick else '  (no --quick)'}" for name, suite in SUITES.items())


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUITES:
        print(f"unknown suite {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    suite = SUITES[name]
    if "--quick" in rest and not suite.quick:
        print(f"suite {name!r} has no --quick form", file=sys.stderr)
        return 2
    module = f"onlinesoftmax.bench.{suite.module}"
    os.environ.update(suite.env)
    sys.argv = [module, *suite.argv, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
