"""``python -m raycep``: the ``raycep`` command line."""
import sys

from raycep.gateway.cli import main

if __name__ == "__main__":
    sys.exit(main())
