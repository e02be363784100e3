"""Efficient Turing-machine simulation by constant bit-size transformers (arXiv:2512.00003)."""
from .machines import (BLANK, MACHINES, TuringMachine, binary_increment, copy_machine, palindrome_machine,
                       run_reference)
from .queues import (DUMMY, KINDS, Clock, LayeredQueueStack, QueueSimulator, SingleQueueSimulator, integer_root,
                     loglog_slope, overhead_per_step)
from .transformer import QueueMachineTransformer

__all__ = ["BLANK", "DUMMY", "KINDS", "MACHINES", "TuringMachine", "binary_increment", "copy_machine",
           "palindrome_machine", "run_reference", "Clock", "LayeredQueueStack", "QueueSimulator",
           "SingleQueueSimulator", "integer_root", "loglog_slope", "overhead_per_step", "QueueMachineTransformer"]
