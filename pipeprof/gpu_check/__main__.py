import sys

from pipeprof.gpu_check.runner import main

sys.exit(main())
