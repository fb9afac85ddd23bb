"""Is the provider there and is it the one configured? One read of its discovery document (OpenID Connect
Discovery 1.0), so the sign-in box can say "single sign-on is unavailable, and why" instead of sending a
learner to an error page. No Streamlit; the caller caches the answer for a short while.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from progress.sso.settings import SsoSettings

PROBE_TIMEOUT_S = 3.0  # a provider slower than this to serve a small JSON file is down for a sign-in too
REQUIRED = ("authorization_endpoint", "token_endpoint", "jwks_uri")  # what the code flow with ID tokens uses
MAX_BYTES = 1_000_000


def provider_problem(settings: SsoSettings, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the provider's discovery document answers and names the configured issuer; otherwise why
    not, in words an operator can act on (the address, the error, and which setting to check)."""
    url = settings.server_metadata_url
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (https, or http on loopback)
            body = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        return (
            f"the provider answered {exc.code} for {url}; check KVLAB_OIDC_ISSUER (the issuer URL, without "
            "/.well-known/...)"
        )
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"the provider at {url} cannot be reached ({reason}); it may be down, or KVLAB_OIDC_ISSUER is wrong"
    try:
        doc = json.loads(body[:MAX_BYTES])
    except (ValueError, UnicodeDecodeError):
        return f"{url} is not a discovery document (not JSON); check KVLAB_OIDC_ISSUER"
    if not isinstance(doc, dict):
        return f"{url} is not a discovery document (not a JSON object); check KVLAB_OIDC_ISSUER"
    if doc.get("issuer") != settings.issuer:
        return (
            f"the provider calls itself {str(doc.get('issuer'))[:200]!r}, not {settings.issuer!r}; set "
            "KVLAB_OIDC_ISSUER to exactly its issuer (a trailing slash counts)"
        )
    missing = [k for k in REQUIRED if not isinstance(doc.get(k), str)]
    if missing:
        return f"the provider's discovery document lacks {', '.join(missing)}; it is not an OpenID Provider"
    return None
