"""What the machine charges while a benchmark runs, measured in the same run, so that a slow figure
can be told apart from slow code.

Two costs move a whole-command benchmark without any change in the code:

- **Fresh memory.** A page a process touches for the first time costs a fault and its zeroing, a
  few tenths of a microsecond, the same as a page freed and touched again (which the probe's second
  fill measures: it faults and zeroes too). On a virtual machine whose host takes freed guest memory
  back (a balloon's free-page reporting, as on the VM these benchmarks were developed on), a page the
  host has reclaimed costs a second fault on the host: 10-57 us measured there, against 0.30-0.37 us
  for the same page touched again. A replay touches roughly its peak RSS once (~0.7 M pages at 512
  ranks), and the charge shows as system time: 3.3-3.8 of a 256-rank replay's 8.3-8.6 CPU s there,
  0.7-0.9 s before the host began to charge (bench/README.md).
- **The CPU itself.** A pure-Python loop's time follows the host's load on shared cores.

The probe runs in a fresh process (the benchmark's own heap would hide the first cost): it fills
``PROBE_MIB`` of new memory once (first touch), then again three times (touched again, the fastest),
and times a fixed Python loop.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

PROBE_MIB = 256
LOOP_ADDITIONS = 5_000_000
PAGE = 4096

# Fresh memory counts as charged extra when its first touch costs this many times a page touched
# again and at least FIRST_TOUCH_FLAG_US: on an ordinary machine both are a few tenths of a
# microsecond (the fault and the zeroing), so neither bound is near what an ordinary machine shows.
FIRST_TOUCH_RATIO_FLAG = 4.0
FIRST_TOUCH_FLAG_US = 2.0

_PROBE = """
import json, time
import numpy as np

def fill(nbytes):
    t = time.perf_counter()
    a = np.ones(nbytes, np.uint8)
    dt = time.perf_counter() - t
    del a
    return dt / (nbytes / {page}) * 1e6

n = {mib} << 20
first = fill(n)
again = min(fill(n) for _ in range(3))
t = time.perf_counter()
s = 0
for i in range({additions}):
    s += i
loop = time.perf_counter() - t
print(json.dumps({{"first_touch_us": first, "touched_again_us": again, "python_loop_s": loop}}))
"""


@dataclass(frozen=True)
class MachineState:
    first_touch_us: float  # per 4 KiB page of memory new to the process
    touched_again_us: float  # per page of the same size, freed and touched again at once
    python_loop_s: float  # LOOP_ADDITIONS additions in a pure-Python loop

    @property
    def charges_fresh_memory(self) -> bool:
        """Whether this machine charges extra for memory a process touches first (see the module)."""
        return (
            self.first_touch_us >= FIRST_TOUCH_FLAG_US
            and self.first_touch_us >= FIRST_TOUCH_RATIO_FLAG * self.touched_again_us
        )

    def line(self, when: str) -> str:
        return (
            f"machine state ({when}): a page of fresh memory {self.first_touch_us:.2f} us to touch, "
            f"{self.touched_again_us:.2f} us touched again; a {LOOP_ADDITIONS / 1e6:g} M-addition Python loop "
            f"{self.python_loop_s:.2f} s"
            + ("  <- this machine charges extra for fresh memory" if self.charges_fresh_memory else "")
        )


def probe(
    python: str = sys.executable,
    timeout: float = 120.0,
    mib: int = PROBE_MIB,
    additions: int = LOOP_ADDITIONS,
) -> MachineState | str:
    """Measure the machine now, in a fresh ``python`` process; an error message if it failed."""
    script = _PROBE.format(page=PAGE, mib=mib, additions=additions)
    try:
        done = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"machine probe failed: no result in {timeout:.0f} s"
    except OSError as e:  # no such interpreter
        return f"machine probe failed: {e}"
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:]
        return f"machine probe failed: {last[0] if last else f'exit {done.returncode}'}"
    return MachineState(**json.loads(done.stdout))
