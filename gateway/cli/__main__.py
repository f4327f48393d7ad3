"""``python3 -m gateway.cli``: the ``raycep`` command."""
import sys

from gateway.cli import main

sys.exit(main())
