"""CLI subcommands of the sandbox (``cuda-agent eval``, ``cuda-agent check``)."""
