"""The error every source failure becomes, and the redaction that keeps URI credentials out of it."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit


class SourceError(RuntimeError):
    """A repo could not be resolved. ``transient`` errors (network, 5xx, deadline) are worth retrying later."""

    def __init__(self, repo: str, uri: str, message: str, *, transient: bool = False):
        self.repo = repo
        self.uri = redact_uri(uri)
        self.message = scrub(message, uri)
        self.transient = transient
        super().__init__(f"repo {repo!r} ({self.uri}): {self.message}")


def redact_uri(uri: str) -> str:
    """``uri`` without user info and with query values other than ``ref`` masked."""
    parts = urlsplit(uri)
    if not parts.scheme:
        return uri
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(f"{k}={v if k == 'ref' else '***'}" for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(text: str, uri: str) -> str:
    """``text`` (e.g. a library's error) with the credentials of ``uri`` masked."""
    parts = urlsplit(uri)
    secrets = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        secrets += [userinfo, unquote(userinfo)] + [unquote(s) for s in userinfo.split(":")]
    secrets += [v for k, v in parse_qsl(parts.query) if k != "ref"] + [parts.query]
    for secret in sorted({s for s in secrets if len(s) >= 3}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
