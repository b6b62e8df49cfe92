"""``pipeprof attach``: a running training process sampled from outside (py-spy, psutil, NVML)."""
