"""llamafit: fit llama.cpp to the memory you have."""

__version__ = "0.1.0"

# The llama.cpp whose rules llamafit mirrors: llama-cpp-python 0.3.36's vendor/llama.cpp. A rule cites
# its source at this commit as `llama.cpp: <path> <function or symbol>` (e.g. `# llama.cpp:
# src/llama-context.cpp llama_context::output_reserve`); "0c1e570" in a docstring is this commit.
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
