"""The worker: claims runnable workflows, runs them on threads, and commits their checkpoints."""
