"""Credentials never travel inside a URL: a ``user:password@`` part or a signed query (AWS, GCS,
Azure signatures, tokens) would be echoed on the terminal and land in the ledger, provenance, logs
and job scripts, where every parameter goes. Such a URL is one line that does not repeat the
secret; anything zarrmill prints about a command line passes through :func:`redact`."""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from ...errors import ConfigError

# query parameters that carry a signature, a credential or a token (AWS SigV2/V4 presigned URLs,
# GCS signed URLs, Azure SAS, OAuth and generic tokens)
SECRET_QUERY_KEYS = frozenset({
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature", "awsaccesskeyid",
    "x-goog-signature", "x-goog-credential", "googleaccessid", "sig", "token",
    "access_token", "id_token", "sas", "key", "api_key", "apikey", "password", "secret"})
URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s'\"]+)")


def secret_in_url(text: str) -> str | None:
    """What kind of secret the URL ``text`` carries ('a user name and password', 'a signed
    query'), or None."""
    if "://" not in text:
        return None
    try:
        parts = urlsplit(text)
    except ValueError:
        return None
    if "@" in parts.netloc:
        return "a user name and password" if ":" in parts.netloc.rsplit("@", 1)[0] else "a user name"
    if any(key.lower() in SECRET_QUERY_KEYS for key, _ in parse_qsl(parts.query, keep_blank_values=True)):
        return "a signed query (signature or token)"
    return None


def without_secret(text: str) -> str:
    """The URL with its user part and query left out: what may be shown of it."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return "<a URL>"
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{host}{parts.path}" + ("?…" if parts.query else "")


def refuse_secret_url(text: str, what: str = "path") -> None:
    """One line, exit 2, for a URL that carries a credential; the line never repeats it."""
    kind = secret_in_url(text)
    if kind is not None:
        raise ConfigError(f"{without_secret(text)}: {what} carries {kind} in the URL, which zarrmill refuses (it "
                          "would be shown and stored with the parameters); give the URL without it and set "
                          "credentials where the client looks for them (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
                          "AWS_PROFILE or ~/.aws for S3)")


def redact(text: str) -> str:
    """``text`` with every URL that carries a secret shortened to what may be shown."""
    return URL.sub(lambda m: without_secret(m.group(0)) if secret_in_url(m.group(0)) else m.group(0), text)
