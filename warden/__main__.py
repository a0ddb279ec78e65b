"""``python -m warden``: the same entry point as the ``warden`` console script."""

import sys

from warden.cli import main

sys.exit(main())
