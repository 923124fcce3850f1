#!/usr/bin/env bash
# Convert every chapter in _toc.yml to a py:percent script under build/chapter_scripts/
# (for running the chapters on a GPU machine that has no Jupyter: see run_chapters.sh).
set -eu
cd "$(dirname "$0")/.."
JUPYTEXT=${JUPYTEXT:-jupytext}
mkdir -p build/chapter_scripts
for md in $(grep -oE 'chapters/[A-Za-z0-9_]+' _toc.yml); do
  "$JUPYTEXT" --quiet --to py:percent "$md.md" -o "build/chapter_scripts/$(basename "$md").py"
done
ls build/chapter_scripts
