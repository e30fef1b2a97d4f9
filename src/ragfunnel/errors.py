"""The error hierarchy. Every message names the bad value and how to fix it."""


class RagfunnelError(Exception):
    """Base class: anything ragfunnel raises on purpose."""


class ConfigError(RagfunnelError):
    """A bad option: unknown name, impossible value, conflicting settings."""


class InputError(RagfunnelError):
    """Bad user data: empty or binary context, empty question, malformed rows."""


class ModelError(RagfunnelError):
    """A model file is missing, corrupt, or cannot be loaded."""


class BackendUnavailable(RagfunnelError):
    """A backend cannot be reached or keeps failing (server down, extra not installed)."""


class MissingExtra(BackendUnavailable):
    """An optional dependency is not installed."""

    def __init__(self, module: str, extra: str):
        super().__init__(
            f"the optional dependency '{module}' is not installed; "
            f"install it with: pip install 'ragfunnel[{extra}]'"
        )
        self.module, self.extra = module, extra

    def __reduce__(self) -> tuple:
        """Rebuilt from its two names, so it survives the trip back from a Ray worker."""
        return (MissingExtra, (self.module, self.extra))


class RunBusy(ConfigError):
    """Another process is writing the same run (its lock is held)."""


class Interrupted(RagfunnelError):
    """A long run was stopped by Ctrl-C or SIGTERM; its message says how many rows are saved."""

    exit_code = 130
