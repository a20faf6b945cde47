"""Children a test interrupts with SIGINT, as Ctrl-C at a terminal would.

A shell without job control starts its background commands with SIGINT ignored, and an ignored signal stays
ignored across exec: Python then installs no KeyboardInterrupt handler, and a test run from such a shell (a CI
job started with `&`, `nohup`) would see the CLI ignore the interrupt the test sends. The child gets SIGINT's
default back before it starts, whatever the test runner inherited.
"""

from __future__ import annotations

import signal


def interruptible() -> None:
    """`preexec_fn` for a child the test will interrupt: SIGINT at its default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
