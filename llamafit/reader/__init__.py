"""Reading GGUF headers with the standard library: byte sources, the header parser, split models and
the ggml type and name tables."""
