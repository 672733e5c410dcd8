"""A report's findings → rulings: parse the report (`report`), map findings to planted
defects (`keymatch`), re-run the cited evidence and read the accused code (`evidence`),
the drive gate and phases (`drive`, `phases`), the rulings model (`rulings`), the `rule`
workflow (`rule`) and the scoring formulas (`scoring`)."""
