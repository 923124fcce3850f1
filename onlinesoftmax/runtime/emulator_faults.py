"""What the CPU emulator reports (emulator.py): its errors, one class per fault it finds, the source lines
behind a fault's program counters, and what a launch touched (LaunchStats)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


class EmulatorError(RuntimeError):
    """The CPU emulator could not run the kernel (the subclasses say why)."""


class EmulatorBuildError(EmulatorError):
    """No C++ compiler, or g++ rejected the kernel (the message names the file's lines)."""


class EmulatorFault(EmulatorError):
    """The emulator stopped the launch (its message names the threads and lines), or an isolated
    launch touched memory outside its arrays, hung, or left outputs unwritten."""


class EmulatorRace(EmulatorFault):
    """Two threads of a block touched one shared-memory byte (at least one writing) with no
    __syncthreads between (nor, in one warp, a __syncwarp or collective): names both threads, their
    source lines and the shared offset."""


class EmulatorOutOfBounds(EmulatorFault):
    """A read or write outside a global array argument: names the argument, the element offset and
    the source line."""


class EmulatorMisaligned(EmulatorFault):
    """A load or store of a 2-, 4-, 8- or 16-byte type at an address not a multiple of its size (a
    GPU faults): names the line and the address."""


class EmulatorScheduleDependent(EmulatorFault):
    """Module.launch_schedules: a schedule gave other outputs than the fixed one."""


_FAULT_KINDS = (("shared-memory race", EmulatorRace), ("out-of-bounds", EmulatorOutOfBounds),
                ("misaligned", EmulatorMisaligned))


def _fault(message: str) -> EmulatorFault:
    for prefix, kind in _FAULT_KINDS:
        if message.startswith(prefix):
            return kind(message)
    return EmulatorFault(message)


def _source_lines(library: Path, message: str) -> str:
    """The message with each "@pc:<offset>@" replaced by the source line (file:line, and the line
    of the kernel's own file that called it when the access is in a header)."""
    offsets = re.findall(r"@pc:([0-9a-f]+)@", message)
    if not offsets:
        return message
    tool = shutil.which("addr2line")
    found = {}
    for offset in dict.fromkeys(offsets):
        place = f"offset 0x{offset} of the library"
        if tool:
            done = subprocess.run([tool, "-i", "-e", str(library), f"0x{offset}"], capture_output=True, text=True)
            frames = [line.strip() for line in done.stdout.splitlines() if line.strip() and not line.startswith("??")]
            frames = [re.sub(r" \(discriminator \d+\)$", "", f) for f in frames]
            frames = [f for f in frames if "/kernels/emulator/" not in f] or frames
            if frames:
                place = frames[0] if len(frames) == 1 or frames[-1] == frames[0] else f"{frames[0]} (from {frames[-1]})"
        found[offset] = place
    return re.sub(r"@pc:([0-9a-f]+)@", lambda m: found[m.group(1)], message)


class LaunchStats:
    """What a launch touched. Per global array argument index i: reads[i] and writes[i] (int64, one
    count per element: how many times a thread read / wrote it; a float4 load counts each of its
    elements once), block_reads[i] (one sorted array of the element indices read per block, in the
    order of the block's linear index x + gridDim.x * (y + gridDim.y * z)); shared_bytes: the most
    shared-memory bytes one block touched. reads, writes and block_reads are empty unless the launch
    asked for stats=True."""

    def __init__(self, reads=None, writes=None, block_reads=None, shared_bytes: int = 0):
        self.reads = reads or {}
        self.writes = writes or {}
        self.block_reads = block_reads or {}
        self.shared_bytes = int(shared_bytes)

    def __repr__(self):
        return (f"LaunchStats(arrays={sorted(self.reads)}, shared_bytes={self.shared_bytes}, "
                f"reads={ {i: int(r.sum()) for i, r in self.reads.items()} }, "
                f"writes={ {i: int(w.sum()) for i, w in self.writes.items()} })")
