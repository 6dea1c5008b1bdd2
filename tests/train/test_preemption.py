import os
import signal

from gpuflow.train.preemption import EXIT_CHECKPOINTED, StopFlag
from operators.pods import failure_policy


def test_exit_code_is_the_one_the_operator_reads_as_checkpointed() -> None:
    assert EXIT_CHECKPOINTED == failure_policy.EXIT_CHECKPOINTED == 75


def test_sigterm_sets_the_flag_and_uninstall_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    flag = StopFlag()
    flag.install()
    try:
        assert not flag.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.requested
    finally:
        flag.uninstall()
    assert signal.getsignal(signal.SIGTERM) == before
