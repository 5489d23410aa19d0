"""``python -m fusion_dd.cli``: the same command line as the ``fusion-dd`` script."""

from fusion_dd.cli import main

main()
