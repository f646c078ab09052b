"""How the process runs, mirroring the runtime.* keys: threads, memory (allocator) and the
distributed learner (torchrun ranks)."""
