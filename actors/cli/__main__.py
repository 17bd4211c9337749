"""``python -m actors.cli``: the ``redelay`` command without its console script."""

import sys

from actors.cli.app import main

sys.exit(main())
