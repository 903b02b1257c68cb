"""``python -m cs_lightning.cli``: the ``cs-lightning`` command, where the console script is not on PATH."""

import sys

from cs_lightning.cli import main

sys.argv[0] = "cs-lightning"  # the name usage lines give, as the console script's
sys.exit(main())
