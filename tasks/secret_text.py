"""Finding and cutting credentials in text (URLs with ``user:password@``, signed queries): the
pure text functions, with no import from the package, so that every place where text leaves the
process can use them (errors.warn included; io/storage/secrets.py refuses such URLs as input)."""
from __future__ import annotations

import re
from typing import TypeVar
from urllib.parse import parse_qsl, urlsplit

# query parameters that carry a signature, a credential or a token (AWS SigV2/V4 presigned URLs,
# GCS signed URLs, Azure SAS, OAuth and generic tokens)
SECRET_QUERY_KEYS = frozenset({
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature", "awsaccesskeyid",
    "x-goog-signature", "x-goog-credential", "googleaccessid", "sig", "token",
    "access_token", "id_token", "sas", "key", "api_key", "apikey", "password", "secret"})
URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s'\"]+)")
# such a parameter after a '?' or '&' where no whole URL surrounds it ("GET /x?X-Amz-Signature=..")
SECRET_PARAM = re.compile(r"(?<=[?&])(" + "|".join(map(re.escape, sorted(SECRET_QUERY_KEYS, key=len, reverse=True)))
                          + r")=[^&\s'\"#]*", re.IGNORECASE)
T = TypeVar("T")


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


def _first_secret(text: str) -> tuple[str, str] | None:
    """(what may be shown of it, what kind) of the first secret in ``text``: the text as one URL,
    any URL inside it (a ``--set`` item, a job script line), or a signed query left without its URL."""
    for url in (text, *(m.group(0) for m in URL.finditer(text))):
        kind = secret_in_url(url)
        if kind is not None:
            return without_secret(url), kind
    if SECRET_PARAM.search(text):
        return "", "a signed query (signature or token)"
    return None


def redact(text: str) -> str:
    """``text`` with every URL that carries a secret shortened to what may be shown, and the value
    of any signed-query parameter left without its URL (a request line, a URL cut by a quote) dropped."""
    text = URL.sub(lambda m: without_secret(m.group(0)) if secret_in_url(m.group(0)) else m.group(0), text)
    return SECRET_PARAM.sub(lambda m: f"{m.group(1)}=…", text)


def redact_tree(doc: T) -> T:
    """A JSON-like document (dicts, lists, strings) with every string redacted: what zarrmill
    writes to a file (provenance, run history) passes through here."""
    if isinstance(doc, str):
        return redact(doc)  # type: ignore[return-value]
    if isinstance(doc, dict):
        return {redact_tree(k): redact_tree(v) for k, v in doc.items()}  # type: ignore[return-value]
    if isinstance(doc, (list, tuple)):
        return type(doc)(redact_tree(v) for v in doc)  # type: ignore[return-value]
    return doc
