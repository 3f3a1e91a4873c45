"""Examples of a user's own task for ``apex train``: an env factory and a network factory
named by entry points (``[env] make`` and ``learner.network``); see ``examples/README.md``."""
