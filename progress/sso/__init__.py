"""Single sign-on through the school's OpenID Provider (no Streamlit here; the sign-in UI is ui/sso.py).

Public API:
- settings (progress/sso/settings.py): `sso_settings(environ)` -> `SsoSettings` or None (SSO off),
  `SsoSettingsError` naming the setting to fix (a kvlab.settings.SettingsError; secrets read by its
  `read_secret`: NAME or NAME_FILE);
- identity (progress/sso/identity.py): `learner_from_claims(claims, settings)` -> `SsoLearner` (stored key from
  issuer + subject, display name, class, teacher or not), `SsoClaimsError`, `is_sso_key`, `subject_key`;
- the provider's health (progress/sso/discovery.py): `provider_problem(settings)` -> None or why not;
- Streamlit's `[auth]` file (progress/sso/streamlit_auth.py): `auth_toml(settings)`, `write_auth_file`.
"""

from progress.sso.discovery import provider_problem
from progress.sso.identity import SsoClaimsError, SsoLearner, is_sso_key, learner_from_claims, subject_key
from progress.sso.settings import SsoSettings, SsoSettingsError, sso_settings
from progress.sso.streamlit_auth import AUTH_FILE, auth_toml, write_auth_file

__all__ = [
    "AUTH_FILE",
    "SsoClaimsError",
    "SsoLearner",
    "SsoSettings",
    "SsoSettingsError",
    "auth_toml",
    "is_sso_key",
    "learner_from_claims",
    "provider_problem",
    "sso_settings",
    "subject_key",
    "write_auth_file",
]
