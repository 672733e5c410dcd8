"""The OpenAI wire as every client of a served model speaks it (see openai.py)."""
