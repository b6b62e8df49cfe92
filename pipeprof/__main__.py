import sys

from pipeprof.cli.entry import main

sys.exit(main())
