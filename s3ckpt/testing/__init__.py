"""Test kit for users of s3ckpt: a moto S3 server that counts and breaks requests, and pytest
fixtures (``s3ckpt.testing.plugin``) for stores on every backend.
"""

from .._boundaries import BOUNDARIES
from .clock import ManualClock
from .faulty import FAULTS, FaultyBackend
from .kill import KillPoint, Outcome, Report, StoreTarget, Trial, kill_and_resume
from .moto_server import Fault, MotoServer, RequestInfo, RequestLog, make_moto_conditional_writes_atomic
from .world import World

__all__ = [
    "BOUNDARIES",
    "FAULTS",
    "Fault",
    "FaultyBackend",
    "KillPoint",
    "ManualClock",
    "MotoServer",
    "Outcome",
    "Report",
    "RequestInfo",
    "RequestLog",
    "StoreTarget",
    "Trial",
    "World",
    "kill_and_resume",
    "make_moto_conditional_writes_atomic",
]
