"""Who used the CPU during a window: the engine, the harness's client, and everyone else.

A speedup measured while another process ate a core is the neighbour's number, not the engine's;
on a 2-core machine the client's own CPU is taken from the engine too. Around each window the
runner takes two snapshots (``harness.run.sensors.cpu``, from Linux ``/proc``) and stores the
differences, computed here:

- ``engine_s``: CPU seconds of the engine server's process group (every worker it started);
- ``client_s``: CPU seconds of the harness process (its client, progress display, scrapes);
- ``others_s``: the machine's busy CPU seconds (``/proc/stat``: user, nice, system, irq, softirq)
  minus those two: every other process on the machine;
- ``steal_s``: time the hypervisor gave this VM's CPUs to other guests (``/proc/stat`` steal).

Shares are per second of the window, in cores (1.0 = one core busy all the time).
"""

from __future__ import annotations

from dataclasses import dataclass

# A window is measured "beside a busy neighbour" above these shares (cores / fraction of the time).
NOISY_OTHERS_CORES = 0.25
NOISY_STEAL = 0.05
# The harness's client "used most of a core": its numbers may be the client's, not the engine's.
BUSY_CLIENT_CORES = 0.5


@dataclass(frozen=True)
class CpuSnapshot:
    busy_s: float  # the machine's busy CPU seconds since boot, all cores
    steal_s: float
    engine_s: float
    client_s: float
    cores: int  # the machine's CPU count when the snapshot was taken


def window_cpu(before: CpuSnapshot | None, after: CpuSnapshot | None) -> dict[str, float] | None:
    """The window's CPU seconds by whom (``harness.results.WindowCpu``)."""
    if before is None or after is None:
        return None
    engine = after.engine_s - before.engine_s
    client = after.client_s - before.client_s
    busy = after.busy_s - before.busy_s
    return {
        "engine_s": engine,
        "client_s": client,
        # tick-granular counters disagree by a tick or two: never a negative neighbour
        "others_s": max(0.0, busy - engine - client),
        "steal_s": after.steal_s - before.steal_s,
        "cores": float(after.cores),
    }
