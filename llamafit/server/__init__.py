"""llama-server itself: its flags, the argv llamafit builds, finding a binary and its dialect, its
log, the launcher, launch scripts."""
