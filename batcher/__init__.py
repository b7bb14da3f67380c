"""The worker: reads records in frames, applies one delta per counter per frame, replies."""
