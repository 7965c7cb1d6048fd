"""``python -m ircore``: the same as the ``ircore`` command."""

import sys

from ircore.cli import main

sys.exit(main())
