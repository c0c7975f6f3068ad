"""``python -m ofa`` (what ``torchrun -m ofa train ...`` runs)."""

import sys

from ofa.cli import main

sys.exit(main())
