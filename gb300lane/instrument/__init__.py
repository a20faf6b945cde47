"""The instrument: sizing, timing and calibrating a card (plan, timeplan, calibrate, lanecal, simulate).

It sits above `cards` and beside `promote`, which uses none of it: what a card *is* (its schema, receipts and
decision) stays in `cards`; how big it must be, how long it takes and whether its error rates hold is here.
"""

from __future__ import annotations

from gb300lane.instrument.calibrate import Calibration, calibrate
from gb300lane.instrument.plan import plan_for

__all__ = ["Calibration", "calibrate", "plan_for"]
