"""The evaluation service's shared secret: where it comes from, how it is checked, when it may be absent.

The service runs the code it is sent (in the sandbox, which isolates neither the file system nor
the network: docs/sandbox.md), so whoever can reach it can run code on the timing node. Off the
loopback interface it therefore needs a token: one secret shared by the service and its clients,

* read from a file (``--token-file``, else ``$CUDA_AGENT_EVAL_TOKEN_FILE``) or from
  ``$CUDA_AGENT_EVAL_TOKEN``, never from a command line (``ps`` shows those to every user); the file,
  once read, is hidden from every jail the process starts (``sandbox.confine.hide``);
* sent as ``Authorization: Bearer <token>`` and compared in constant time;
* never logged, echoed in an error or shown by ``repr``.

The token keeps other users of the network out; it does not encrypt (plain HTTP): keep the service
on a private network. Stdlib only (and the sandbox's ``confine``, stdlib too), like the service.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
from collections.abc import Mapping
from pathlib import Path

TOKEN_ENV = "CUDA_AGENT_EVAL_TOKEN"
TOKEN_FILE_ENV = "CUDA_AGENT_EVAL_TOKEN_FILE"
MIN_TOKEN_CHARS = 16
"""Shorter secrets are refused: ``python3 -c 'import secrets; print(secrets.token_hex(32))'`` makes one."""


class ServiceConfigError(ValueError):
    """A service or client setting that cannot work. The message is one sentence for the user."""


def read_token(token_file: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The shared secret from ``token_file``, else ``$CUDA_AGENT_EVAL_TOKEN_FILE``, else
    ``$CUDA_AGENT_EVAL_TOKEN``; None when none of them is set. Raises ServiceConfigError for an
    unreadable file or an unusable token (the message names the source, never the token)."""
    env = os.environ if environ is None else environ
    path = token_file or env.get(TOKEN_FILE_ENV)
    if path:
        from ..sandbox import confine

        confine.hide(path)  # from every jail this process starts, whatever directory holds it
        try:
            token = Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ServiceConfigError(f"token file {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
        return _checked(token, f"token file {path}")
    token = env.get(TOKEN_ENV, "").strip()
    return _checked(token, f"${TOKEN_ENV}") if token else None


def _checked(token: str, source: str) -> str:
    if len(token) < MIN_TOKEN_CHARS:
        raise ServiceConfigError(f"{source}: the token must have at least {MIN_TOKEN_CHARS} characters "
                                 f"(make one with: python3 -c 'import secrets; print(secrets.token_hex(32))')")
    if not (token.isascii() and token.isprintable()) or any(c.isspace() for c in token):
        raise ServiceConfigError(f"{source}: the token must be printable ASCII without spaces (it travels in an HTTP header)")
    return token


def bearer_ok(authorization: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (constant-time comparison)."""
    scheme, _, given = (authorization or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the service on this machine. A name counts as loopback only if
    every address it resolves to is; ``""``, ``0.0.0.0`` and ``::`` (all interfaces) are not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (socket.gaierror, UnicodeError):
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def check_binding(host: str, token: str | None) -> None:
    """Refuse to serve a network without a token (loopback without one stays allowed, for local use)."""
    if token is None and not is_loopback(host):
        raise ServiceConfigError(
            f"refusing to serve on {host or 'all interfaces'} without a token, because other machines could "
            f"run code on this one through it: give the service a secret (--token-file FILE, "
            f"${TOKEN_FILE_ENV} or ${TOKEN_ENV}) or bind 127.0.0.1")
