-- Single sign-on (issue 37). A user made by an OpenID Connect sign-in is keyed by its
-- provider's (issuer, subject); its email is for display and its password hash empty.
-- break_glass marks the users `flagstaff user create --break-glass` made: the only ones whose
-- password still works when FLAGSTAFF_OIDC_ONLY is on.
ALTER TABLE users
    ADD COLUMN oidc_issuer text COLLATE "C",
    ADD COLUMN oidc_subject text COLLATE "C",
    ADD COLUMN break_glass boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX users_oidc_identity ON users (oidc_issuer, oidc_subject)
    WHERE oidc_subject IS NOT NULL;

-- Sign-ins sent to the provider and not back yet, by the SHA-256 of their state; taken (and
-- deleted) once by the callback, so a state and its code are used once.
CREATE TABLE oidc_logins (
    state_hash text COLLATE "C" PRIMARY KEY,
    nonce text NOT NULL,
    code_verifier text NOT NULL,
    next_path text NOT NULL,
    created_at_ms bigint NOT NULL,
    expires_at_ms bigint NOT NULL
);
CREATE INDEX oidc_logins_expiry ON oidc_logins (expires_at_ms);
