"""Optional dependencies (pyproject's extras): what each one brings, and the one clear error
when a command needs one that is not installed. `make setup` installs them all.

    azure   the azure stack's SDKs (Container Apps over ARM, DefaultAzureCredential)
    plots   matplotlib: the load benchmark's and `fitness history`'s PNG plots
"""

from __future__ import annotations

from harness.errors import PreflightError

# extra -> the top-level modules it provides
EXTRAS: dict[str, tuple[str, ...]] = {"azure": ("azure",), "plots": ("matplotlib",)}


def extra_of(exc: ImportError) -> str | None:
    """The extra whose module is missing in `exc`, or None (another import failed: a bug)."""
    top = (exc.name or "").split(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def missing(extra: str, what: str, exc: ImportError) -> PreflightError:
    return PreflightError(f"{what} needs the `{extra}` extra, which is not installed ({exc.name} is missing)",
                          field=extra, fix=f"pip install -e '.[{extra}]' in the harness's venv (`make setup` "
                                           "installs every extra)")
