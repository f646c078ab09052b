"""Files puffer writes and reads: signed checkpoints, model files (safetensors), spaces as JSON,
and which files may run code when read (trust)."""
