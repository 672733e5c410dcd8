"""What the serving did while the agent worked: a /metrics timeline of the run window,
its per-turn join with opencode's store, tool-call health, the record's serving section,
and the KV-fit check preflight runs before anything bills."""
