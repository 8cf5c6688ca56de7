"""``python -m s3ckpt``: the operator CLI."""

from .cli import main

main()
