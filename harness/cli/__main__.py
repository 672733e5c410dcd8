"""`python -m harness.cli`: the same app as the `llms-benchmark` script (the fitness API starts runs this way)."""

from harness.cli import main

main()
