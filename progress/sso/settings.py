"""The operator's single sign-on settings (``KVLAB_OIDC_*``), read and checked once, with a message naming
the setting and the fix for each mistake (no Streamlit, no network).

Single sign-on is off unless ``KVLAB_OIDC_ISSUER`` is set. Then the provider's client (id and secret), the
app's public callback address and the class learners join are required; which claims name the learner and
which make a teacher have defaults (docs/SECURITY.md, Single sign-on, has the table). Secrets come from the
variable or from a file named by ``NAME_FILE`` (compose and Kubernetes secrets), never both: the rule of every
secret (kvlab/settings.py: ``read_secret``). A wrong setting here does not stop the server as the others do
(kvlab.settings.load_settings): single sign-on is then off and says why, and the passphrase sign-in stays.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kvlab.settings import COOKIE_SECRET, SettingsError, read_secret, switch
from progress.names import validate_name

PREFIX = "KVLAB_OIDC_"
CALLBACK_PATH = "/oauth2callback"  # Streamlit's OIDC callback route (st.login)
DEFAULT_SCOPES = "openid profile email"
DEFAULT_NAME_CLAIMS = ("name", "preferred_username")
PROMPTS = ("select_account", "login", "consent", "none")  # OIDC Core 3.1.2.1's prompt values
SECRET_MAX = 4096  # characters; a client secret or cookie secret longer than this is a wrong file
CLAIM_MAX = 64  # characters of a claim name


class SsoSettingsError(SettingsError):
    """A single sign-on setting that cannot be used; the message names it (``setting``, as kvlab.settings'
    errors do) and says how to fix it. Unlike the other settings' errors it does not stop the server: single
    sign-on stays off, the sign-in box says why, and the passphrase sign-in keeps working."""

    def __init__(self, message: str) -> None:
        named = re.search(r"KVLAB_OIDC_[A-Z_]+", message)
        super().__init__(named.group(0).removesuffix("_FILE") if named else PREFIX + "ISSUER", message)


@dataclass(frozen=True)
class SsoSettings:
    """What the app needs to sign learners in through the school's OpenID Provider."""

    issuer: str  # as the provider states it in its discovery document (no trailing slash added or removed)
    client_id: str
    client_secret: str
    redirect_uri: str  # the app's public address + /oauth2callback, registered at the provider
    cookie_secret: str  # signs Streamlit's identity cookie; every replica needs the same one
    class_code: str | None  # one fixed class for every learner (validate_name'd) ...
    class_claim: str | None  # ... or the claim that holds each learner's class code
    key_claim: str = "sub"  # the claim that identifies a learner at the issuer (with the issuer: their key)
    name_claims: tuple[str, ...] = DEFAULT_NAME_CLAIMS  # the first one present is the name shown
    teacher_claim: str | None = None  # a claim that makes a teacher (None: no teacher by sign-on)
    teacher_value: str | None = None  # the value (or group) in it that does; None: the claim must be true
    scopes: str = DEFAULT_SCOPES
    prompt: str = "select_account"
    only: bool = False  # True: the passphrase sign-in is not offered

    @property
    def server_metadata_url(self) -> str:
        """The provider's discovery document (OpenID Connect Discovery 1.0, section 4)."""
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"

    def redacted(self) -> dict[str, str]:
        """The settings as a log line may show them: secrets replaced by "(set)"."""
        shown = {k: str(v) for k, v in self.__dict__.items() if v is not None}
        shown["client_secret"] = shown["cookie_secret"] = "(set)"
        return shown


def _secret(environ: Mapping[str, str], name: str) -> str | None:
    """The secret ``name`` or the file ``name``_FILE names (kvlab.settings.read_secret: the rule every secret
    follows), on one line; None when neither is set."""
    try:
        value = read_secret(environ, name)
    except SettingsError as exc:
        raise SsoSettingsError(str(exc)) from exc
    if value is not None and (len(value) > SECRET_MAX or any(unicodedata.category(ch) == "Cc" for ch in value)):
        raise SsoSettingsError(
            f"{name} (hidden) holds control characters or is over {SECRET_MAX} characters; "
            "it must be the secret alone, on one line"
        )
    return value


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(environ: Mapping[str, str], name: str, example: str) -> str:
    """An absolute https URL (http only on this machine's loopback, for tests) from setting ``name``."""
    text = environ.get(name, "").strip()
    if not text:
        raise SsoSettingsError(f"{name} is not set; single sign-on needs it, e.g. {example}")
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
    except ValueError as exc:
        raise SsoSettingsError(f"{name} {text[:200]!r} is not a URL ({exc}); use e.g. {example}") from exc
    if parts.scheme not in ("https", "http") or not host or parts.query or parts.fragment:
        raise SsoSettingsError(f"{name} {text[:200]!r} is not an absolute https URL; use e.g. {example}")
    if parts.scheme == "http" and not _loopback(host):
        raise SsoSettingsError(
            f"{name} {text[:200]!r} uses http on a network host: sign-in codes and secrets would cross the "
            f"network in clear; use https (e.g. {example})"
        )
    return text


def _claim(environ: Mapping[str, str], name: str, default: str | None) -> str | None:
    text = environ.get(name, "").strip()
    if not text:
        return default
    if len(text) > CLAIM_MAX or not all(ch.isalnum() or ch in "_-.:/" for ch in text):
        raise SsoSettingsError(
            f"{name} {text[:80]!r} is not a claim name; use the claim's name as the provider writes it in its "
            "ID token, e.g. groups, roles or preferred_username"
        )
    return text


def _flag(environ: Mapping[str, str], name: str) -> bool:
    try:
        return switch(environ, name, False)
    except SettingsError as exc:
        raise SsoSettingsError(str(exc)) from exc


def sso_settings(environ: Mapping[str, str]) -> SsoSettings | None:
    """The single sign-on settings in ``environ`` (None when ``KVLAB_OIDC_ISSUER`` is unset), checked:
    SsoSettingsError names the first setting that is wrong or missing and the fix."""
    if not environ.get(PREFIX + "ISSUER", "").strip():
        others = sorted(k for k in environ if k.startswith(PREFIX) and environ[k].strip())
        if others:
            raise SsoSettingsError(
                f"{others[0]} is set but KVLAB_OIDC_ISSUER is not; set the provider's issuer URL "
                "(e.g. https://login.school.example/realms/class) or unset the KVLAB_OIDC_ settings"
            )
        return None
    issuer = _url(environ, PREFIX + "ISSUER", "https://login.school.example/realms/class")
    client_id = environ.get(PREFIX + "CLIENT_ID", "").strip()
    if not client_id:
        raise SsoSettingsError("KVLAB_OIDC_CLIENT_ID is not set; use the client id the provider gave this app")
    client_secret = _secret(environ, PREFIX + "CLIENT_SECRET")
    if client_secret is None:
        raise SsoSettingsError(
            "KVLAB_OIDC_CLIENT_SECRET_FILE (or KVLAB_OIDC_CLIENT_SECRET) is not set; point it at a file holding "
            "the client secret the provider gave this app"
        )
    redirect_uri = _url(environ, PREFIX + "REDIRECT_URI", "https://kvlab.school.example/oauth2callback")
    if not urlsplit(redirect_uri).path.endswith(CALLBACK_PATH):
        raise SsoSettingsError(
            f"KVLAB_OIDC_REDIRECT_URI {redirect_uri[:200]!r} must end with {CALLBACK_PATH} (Streamlit's "
            "callback), e.g. https://kvlab.school.example/oauth2callback; register the same address at the provider"
        )
    cookie_secret = (  # the app's own cookie secret by default: one secret for XSRF and identity cookies
        _secret(environ, PREFIX + "COOKIE_SECRET")
        or _secret(environ, COOKIE_SECRET)
        or environ.get("STREAMLIT_SERVER_COOKIE_SECRET")
    )
    if not cookie_secret or len(cookie_secret) < 32:
        raise SsoSettingsError(
            "KVLAB_OIDC_COOKIE_SECRET_FILE (by default KVLAB_COOKIE_SECRET_FILE, which compose sets) must hold 32 "
            "or more random characters (openssl rand -hex 32): it signs the sign-on cookie, the same on every replica"
        )
    fixed, class_claim = environ.get(PREFIX + "CLASS", "").strip(), _claim(environ, PREFIX + "CLASS_CLAIM", None)
    if fixed and class_claim:
        raise SsoSettingsError("KVLAB_OIDC_CLASS and KVLAB_OIDC_CLASS_CLAIM are both set; keep one")
    if not fixed and not class_claim:
        raise SsoSettingsError(
            "KVLAB_OIDC_CLASS (one class code for everyone who signs on) or KVLAB_OIDC_CLASS_CLAIM (the claim "
            "holding each learner's class code) must be set"
        )
    try:
        class_code = validate_name(fixed, "class code") if fixed else None
    except ValueError as exc:
        raise SsoSettingsError(f"KVLAB_OIDC_CLASS: {exc}") from exc
    names = tuple(n.strip() for n in environ.get(PREFIX + "NAME_CLAIMS", "").split(",") if n.strip())
    for name in names:  # each checked as a claim name, the message naming the list's setting
        _claim({PREFIX + "NAME_CLAIMS": name}, PREFIX + "NAME_CLAIMS", None)
    teacher_claim = _claim(environ, PREFIX + "TEACHER_CLAIM", None)
    teacher_value = environ.get(PREFIX + "TEACHER_VALUE", "").strip() or None
    if teacher_value and not teacher_claim:
        raise SsoSettingsError(
            "KVLAB_OIDC_TEACHER_VALUE is set but KVLAB_OIDC_TEACHER_CLAIM is not; name the claim that holds it "
            "(e.g. groups)"
        )
    scopes = " ".join(environ.get(PREFIX + "SCOPES", "").split()) or DEFAULT_SCOPES
    if "openid" not in scopes.split():
        raise SsoSettingsError(f"KVLAB_OIDC_SCOPES {scopes[:200]!r} lacks openid; OpenID Connect needs it")
    prompt = environ.get(PREFIX + "PROMPT", "").strip() or "select_account"
    if prompt not in PROMPTS:
        raise SsoSettingsError(f"KVLAB_OIDC_PROMPT {prompt[:40]!r} is not one of {', '.join(PROMPTS)}")
    return SsoSettings(
        issuer=issuer,
        client_id=client_id,
        client_secret=client_secret,
        redirect_uri=redirect_uri,
        cookie_secret=cookie_secret,
        class_code=class_code,
        class_claim=class_claim,
        key_claim=_claim(environ, PREFIX + "KEY_CLAIM", "sub") or "sub",
        name_claims=names or DEFAULT_NAME_CLAIMS,
        teacher_claim=teacher_claim,
        teacher_value=teacher_value,
        scopes=scopes,
        prompt=prompt,
        only=_flag(environ, PREFIX + "ONLY"),
    )
