"""``python -m bvr.cli``: the same as the ``bvr`` console script."""

from bvr.cli import main

main()
