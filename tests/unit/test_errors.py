"""planner.errors.sigterm_as_interrupt: a real SIGTERM sent to this process."""

from __future__ import annotations

import os
import signal
import time

import pytest

from planner.errors import sigterm_as_interrupt


def test_sigterm_unwinds_like_ctrl_c_inside_the_block_only() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts it
    assert signal.getsignal(signal.SIGTERM) is before
