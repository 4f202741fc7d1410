"""llamafit: fit llama.cpp to the memory you have."""

__version__ = "0.1.0"
