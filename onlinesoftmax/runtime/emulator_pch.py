"""The emulator's header, simt.h, precompiled once per set of g++ flags.

Every kernel the emulator runs is a g++ build that starts with `#include "simt.h"`, and parsing
that header (the machine, the checks, the C++ library it uses) is about half of a build's time. g++
reads `simt.h.gch` in place of `simt.h` when it finds one first on the include path and it was
made with the same flags; one that does not match is passed over and the header is read as text,
so a stale or unusable file costs time, never a wrong build.

The file lives in build/emulator/pch-<key>/, the key a hash of the compiler, the flags and the text
of every emulator header; a change to any of them makes a new one.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path


def precompiled_header(cxx: str, flags: list[str], emulator_dir: Path, cache_dir: Path,
                       timeout_s: float) -> Path | None:
    """The folder holding simt.h.gch for these flags (built now if it is not there), to put first on
    g++'s include path; None if g++ could not make it (the build then reads the header as text)."""
    headers = "".join(p.read_text() for p in sorted(emulator_dir.glob("*.*h")))
    key = hashlib.sha256("\0".join((cxx, *flags, headers)).encode()).hexdigest()[:16]
    folder = cache_dir / f"pch-{key}"
    if (folder / "simt.h.gch").exists():
        return folder
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as work:   # parallel builds: the last one wins
        partial = Path(work) / "simt.h.gch"
        command = [cxx, *flags, "-x", "c++-header", str(emulator_dir / "simt.h"), "-o", str(partial)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            return None
        folder.mkdir(exist_ok=True)
        os.replace(partial, folder / "simt.h.gch")
    return folder
