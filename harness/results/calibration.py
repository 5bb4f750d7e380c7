"""A machine calibration (``bench calibrate``): the start-up spread of one regime on one machine.

Measured by starting every arm's server 5+ times in rounds on a small window; the arms x rounds
model's residual spread (``harness.derive.intervals.residual_spread``) is what a run with one start-up per
arm cannot measure for itself. Stored under the user's cache (or a path given) by the run side; a
run that uses one copies it into its directory as ``calibration.json``, so re-deriving the run
gives the same intervals. A calibration belongs to one regime fingerprint and one machine: any
other is refused, as comparisons are.
"""

from __future__ import annotations

from typing import Literal

from harness.results.records import ResultModel

CALIBRATION_FILE = "calibration.json"


class Calibration(ResultModel):
    schema_version: Literal[1, 2] = 2
    regime_name: str
    regime_fingerprint: str  # of the calibrated regime (the run's own, not the small window's)
    machine_fingerprint: str  # harness.core.machine.environment_fingerprint of the machine
    machine: dict[str, object]  # harness.core.machine.machine_identity: what the fingerprint covers
    created: str  # ISO 8601 UTC
    run_id: str  # the calibration's own run directory, under results/
    rounds: int
    arms: list[str]
    sd: float  # residual sd of log(start-up mean tok/s)
    df: int  # its degrees of freedom (one cell's: the cells of a start-up share its server)
    cells: int  # how many (workload, load level) cells it averaged
    # version 2: the sd of one arm's log(start-up mean tok/s) across rounds, the round's drift
    # included (harness.derive.intervals.arm_spread), and its degrees of freedom: what a comparison of one
    # arm across two runs has (a relative gate), where the drift does not cancel. None: version 1
    arm_sd: float | None = None
    arm_df: int | None = None

    def file_name(self) -> str:
        """Its name in a calibration store: one file per regime name, fingerprint and machine (a
        newer calibration of the same replaces it)."""
        return f"{self.regime_name}-{self.regime_fingerprint[:12]}-{self.machine_fingerprint[:12]}.json"

    def label(self) -> str:
        return (
            f"this machine's calibration of {self.created[:10]} ({self.rounds} rounds of "
            f"{len(self.arms)} arms, start-up sd {100 * self.sd:.1f}%, {self.run_id})"
        )
