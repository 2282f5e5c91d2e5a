import sys

from lumos_core.cli import main

sys.exit(main())
