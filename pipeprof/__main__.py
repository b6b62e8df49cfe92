import sys

from pipeprof.cli.main import main

sys.exit(main())
