"""Test kit for users of s3ckpt: a moto S3 server that counts and breaks requests, and pytest
fixtures (``s3ckpt.testing.plugin``) for stores on every backend.
"""

from .moto_server import Fault, MotoServer, RequestInfo, RequestLog, make_moto_conditional_writes_atomic

__all__ = ["Fault", "MotoServer", "RequestInfo", "RequestLog", "make_moto_conditional_writes_atomic"]
