"""TLS for the gRPC hops: server credentials from PEM files (optional client CA = mutual TLS),
and the matching client credentials.

Files, not inline PEM: a Kubernetes Secret of type kubernetes.io/tls (what cert-manager writes:
tls.crt, tls.key, ca.crt) mounts as exactly these files. Files are read at start; a rotated
certificate takes a restart (a rollout), as for every other Secret the services read.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from macaron.auth.settings import ClientTlsSettings, ServerTlsSettings


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"cannot read {path} ({exc.strerror}): mount the certificate Secret there") from None


class TlsConfigError(ValueError):
    """A configured certificate or key file is missing or unreadable."""


def server_credentials(tls: ServerTlsSettings) -> grpc.ServerCredentials | None:
    """The server's credentials, or None when TLS is off."""
    if not tls.enabled:
        return None
    chain, key = _read(tls.cert_file), _read(tls.key_file)
    client_ca = _read(tls.client_ca_file)
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def add_port(server: grpc.aio.Server, address: str, tls: ServerTlsSettings) -> int:
    """Binds `address` with TLS when configured; returns the bound port. A port another process holds is an
    error that names the address (servers own their port: `macaron.grpc_server`)."""
    credentials = server_credentials(tls)
    try:
        if credentials is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise RuntimeError(f"could not bind {address}: another process holds the port, or the host is not an address "
                           "of this machine; stop that process or configure another port") from exc


def channel_credentials(tls: ClientTlsSettings) -> grpc.ChannelCredentials | None:
    """The client's credentials, or None when TLS is off."""
    if not tls.on:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca_file), private_key=_read(tls.key_file), certificate_chain=_read(tls.cert_file)
    )


def channel_options(tls: ClientTlsSettings) -> list[tuple[str, str]]:
    """The target-name override, when one is set."""
    return [("grpc.ssl_target_name_override", tls.server_name)] if tls.on and tls.server_name else []
