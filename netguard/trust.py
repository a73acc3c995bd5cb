"""The trust roots both policies verify a server's certificate by."""

import functools
import os
import ssl

import httpx2


def trust_roots() -> ssl.SSLContext:
    """The system's trust roots, or those named by SSL_CERT_FILE / SSL_CERT_DIR (a private CA):
    one context per process while those stay the same (loading the roots costs 10 to 100 ms, and
    every MCP call and every run's model client is a client of its own; a context is safe to
    share between connections)."""
    return _trust_roots_for(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.lru_cache(maxsize=4)
def _trust_roots_for(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    return httpx2.create_ssl_context(verify=True, trust_env=True)
