"""One launch of a preset on an environment, from preflight to the destroyed unit: the launch
itself (`launch`), its preflight, the unit's life (`units`: the serve-once claim, serve, wait,
destroy, signal guards; `unit_death`, `unitlog`), where its files go (`paths`), what it writes
(`record`, `summary`), and how it leaves (`clean_exit`, `failpoint` for the fault tests).
The launch's steps themselves are `harness/stages/`."""
