"""Credentials never travel inside a URL: a ``user:password@`` part or a signed query (AWS, GCS,
Azure signatures, tokens) would be echoed on the terminal and land in the ledger, provenance, logs
and job scripts, where every parameter goes. Such a URL given to zarrmill is one line that does not
repeat the secret (:func:`refuse_secret_url`); text that arrives from elsewhere (a server's answer
in a reader's error) passes through :func:`redact` wherever it leaves the process: the terminal and
log handlers (runtime/front/redaction.py), errors.log, crash files, provenance and run history
(:func:`redact_tree`)."""
from __future__ import annotations

from ...errors import ConfigError
from ...secret_text import (SECRET_PARAM, SECRET_QUERY_KEYS, URL, _first_secret, redact,  # noqa: F401 - re-exported
                            redact_tree, secret_in_url, without_secret)


def refuse_secret_url(text: str, what: str = "path") -> None:
    """One line, exit 2, for a URL (or text holding one) that carries a credential; the line never
    repeats it."""
    found = _first_secret(text)
    if found is not None:
        shown, kind = found
        raise ConfigError(f"{shown + ': ' if shown else ''}{what} carries {kind} in the URL, which zarrmill refuses (it "
                          "would be shown and stored with the parameters); give the URL without it and set "
                          "credentials where the client looks for them (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
                          "AWS_PROFILE or ~/.aws for S3)")
