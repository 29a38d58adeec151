"""One TLS context per process for every outbound HTTPS client (model SDKs, http tools).

An HTTP client built without one loads the CA bundle itself: about 20 ms of CPU and 0.8 MiB
per client, i.e. per Task and per tool call. Built the way httpx builds its default
(certifi, or SSL_CERT_FILE / SSL_CERT_DIR when set), once.
"""

from __future__ import annotations

import ssl

import httpx2

_SSL_CONTEXT: ssl.SSLContext | None = None


def shared_ssl_context() -> ssl.SSLContext:
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx2.create_ssl_context()
    return _SSL_CONTEXT
