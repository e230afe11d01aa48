-- Single sign-on (issue 37). A user made by an OpenID Connect sign-in is keyed by its
-- provider's (issuer, subject); its email is for display and its password hash empty.
-- break_glass marks the users `flagstaff user create --break-glass` made: the only ones whose
-- password still works when FLAGSTAFF_OIDC_ONLY is on.
ALTER TABLE users ADD COLUMN oidc_issuer TEXT;
ALTER TABLE users ADD COLUMN oidc_subject TEXT;
ALTER TABLE users ADD COLUMN break_glass INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX users_oidc_identity ON users(oidc_issuer, oidc_subject)
    WHERE oidc_subject IS NOT NULL;

-- Sign-ins sent to the provider and not back yet, by the SHA-256 of their state; taken (and
-- deleted) once by the callback, so a state and its code are used once.
CREATE TABLE oidc_logins (
    state_hash TEXT PRIMARY KEY,
    nonce TEXT NOT NULL,
    code_verifier TEXT NOT NULL,
    next_path TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX oidc_logins_expiry ON oidc_logins(expires_at_ms);
