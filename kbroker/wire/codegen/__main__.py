import sys

from kbroker.wire.codegen.cli import main

sys.exit(main())
