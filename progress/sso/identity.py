"""Who a single sign-on learner is, from the claims of the provider's ID token (no Streamlit, no network).

A learner is their provider's subject: the issuer and the key claim (``sub`` by default), hashed into a stored
learner key ``sso:`` + 36 hex digits. A typed name can never be such a key (``:`` is in no name,
progress/names.py), so a passphrase sign-in can never reach an SSO learner's progress and two people the
provider calls "Ana" stay two learners. The name shown (``name``, else ``preferred_username``) is display
text only: it is cleaned of controls and invisible characters, cut to 40 characters, never compared and
always rendered inert. A teacher is whoever carries the configured claim (a group in ``groups``, a role, or
a claim that is true); nothing a learner can type makes one.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from progress.names import NAME_MAX_LEN, is_invisible, validate_name
from progress.sso.settings import SsoSettings

KEY_PREFIX = "sso:"  # stored learner keys of SSO learners; ":" is in no typed name's key
KEY_HEX = NAME_MAX_LEN - len(KEY_PREFIX)  # 36 hex digits (144 bits) fill the 40-character key column
SUBJECT_MAX = 255  # characters of a subject (OIDC Core 2: sub is at most 255 ASCII characters)


class SsoClaimsError(ValueError):
    """The provider's claims do not name a learner this app can keep; the message says which claim and why."""


@dataclass(frozen=True)
class SsoLearner:
    """A learner signed in by the provider: their stored key, the name shown, their class, and teacher or not."""

    learner_key: str  # KEY_PREFIX + hash of (issuer, subject): the progress row's learner_key
    display: str  # the name the provider gave, cleaned; display only
    class_code: str  # validate_name'd
    teacher: bool


def subject_key(issuer: str, subject: str) -> str:
    """The stored learner key of ``subject`` at ``issuer``."""
    digest = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()
    return KEY_PREFIX + digest[:KEY_HEX]


def is_sso_key(learner_key: str) -> bool:
    """Whether a stored learner key belongs to a single sign-on learner (no passphrase, no reset)."""
    return learner_key.startswith(KEY_PREFIX)


def display_name(value: object) -> str:
    """Claim text as a name to show: NFKC, without controls or invisible characters, spaces collapsed, at
    most 40 characters; "" when nothing visible is left."""
    if not isinstance(value, str):
        return ""
    text = unicodedata.normalize("NFKC", value)
    text = "".join(" " if ch.isspace() else ch for ch in text if ch.isspace() or not is_invisible(ch))
    return " ".join(text.split())[:NAME_MAX_LEN].strip()


def _teacher(claims: Mapping[str, object], settings: SsoSettings) -> bool:
    if settings.teacher_claim is None:
        return False
    value = claims.get(settings.teacher_claim)
    if settings.teacher_value is None:
        return value is True or (isinstance(value, str) and value.strip().lower() == "true")
    if isinstance(value, str):
        return value == settings.teacher_value
    if isinstance(value, list | tuple):
        return any(isinstance(v, str) and v == settings.teacher_value for v in value)
    return False


def learner_from_claims(claims: Mapping[str, object], settings: SsoSettings) -> SsoLearner:
    """The learner the ID token's ``claims`` name under ``settings``; SsoClaimsError when the token is from
    another issuer, lacks the key claim, or (with KVLAB_OIDC_CLASS_CLAIM) carries no usable class code."""
    issuer = claims.get("iss")
    if issuer != settings.issuer:
        raise SsoClaimsError(
            f"the sign-in came from issuer {str(issuer)[:200]!r}, not from {settings.issuer!r} "
            "(KVLAB_OIDC_ISSUER); sign out and sign in again"
        )
    subject = claims.get(settings.key_claim)
    if isinstance(subject, int) and not isinstance(subject, bool):
        subject = str(subject)
    if not isinstance(subject, str) or not subject or len(subject) > SUBJECT_MAX:
        raise SsoClaimsError(
            f"the provider's ID token has no usable {settings.key_claim!r} claim (KVLAB_OIDC_KEY_CLAIM): it must "
            f"be text of 1-{SUBJECT_MAX} characters; ask whoever runs the server to check the setting"
        )
    key = subject_key(settings.issuer, subject)
    shown = next((n for n in (display_name(claims.get(c)) for c in settings.name_claims) if n), "")
    if settings.class_code is not None:
        class_code = settings.class_code
    else:
        raw = claims.get(settings.class_claim or "")
        try:
            class_code = validate_name(raw, "class code")
        except ValueError as exc:
            raise SsoClaimsError(
                f"the provider's {settings.class_claim!r} claim (KVLAB_OIDC_CLASS_CLAIM) is not a class code: "
                f"{exc}; ask your teacher to set it at the provider"
            ) from exc
    return SsoLearner(key, shown or f"learner {key[len(KEY_PREFIX) :][:6]}", class_code, _teacher(claims, settings))
