"""Where each second goes: the profiler, the machine's usage, and the live progress display."""
