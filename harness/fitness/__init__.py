"""`llms-benchmark fitness`: is a served preset fit to drive agents?

Phases (telemetry, warmup, tooluse, throughput, capacity, capability, kl, judge) run against
a preset served once or a base URL; thresholds turn metrics into PASS/WARN/FAIL verdicts
and the exit code is the contract: 0 all pass, 1 warn only, 2 any fail, 3 pipeline error.
"""
