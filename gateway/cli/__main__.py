"""``python3 -m gateway.cli``: the ``raycep`` command."""
import sys

from raycep.gateway.cli import main

sys.exit(main())
