"""What a run leaves on disk, named and shaped: its paths (`paths`), its record (`record`) and the
figures the record holds (`capacity`, `drive`, `engine`, `serving`, `unit_death`). It imports no
other part of the harness but `atomic` and `errors`, so every stage, stack and reader can."""
