"""Integrations of s3ckpt with other frameworks; each lives in its own module or package and needs its extra
(``pip install "s3ckpt[langgraph]"`` for :mod:`s3ckpt.integrations.langgraph`)."""
