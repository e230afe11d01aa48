// A real OpenID Provider for the single sign-on tests: panva's certified `oidc-provider` on a
// loopback port (issuer http://127.0.0.1:<port>), one client registered with the test server's
// redirect URI, test users whose groups a test can change between logins, and a minimal
// interaction (a username form; consent is granted at once) instead of the dev UI.
//
//   node oidc_provider.mjs '{"port": 0, "client_id": "...", "client_secret": "...",
//                            "redirect_uri": "...", "users": {"alice": {...}}}'
//
// It prints one line `{"issuer": ..., "other_issuer": ...}` once listening. Test-only routes:
//   POST /_test/users     {"alice": {"email", "email_verified", "name", "groups"}} (replaces)
//   POST /_test/mischief  {"mode": "..."}: the next token response's ID token is replaced by a
//       bad one: forged (same kid, another key), unknown_key, expired, wrong_audience,
//       other_issuer (a second provider's token: its issuer, its key), alg_none,
//       hs256_public (HMAC keyed with the public key), wrong_nonce.
// A second provider instance (other_issuer) runs on another port with its own keys.
import http from "node:http";
import crypto from "node:crypto";
import Provider from "oidc-provider";
import { SignJWT, exportJWK, generateKeyPair, decodeJwt, decodeProtectedHeader, exportSPKI } from "jose";

const spec = JSON.parse(process.argv[2] || "{}");
let users = spec.users || {};
let mischief = null;

async function signingKey(kid) {
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true });
  const jwk = { ...(await exportJWK(privateKey)), kid, alg: "RS256", use: "sig" };
  return { privateKey, publicKey, jwk };
}

const main = await signingKey("main-1");
const attacker = await signingKey("main-1"); // the same kid as the provider's key
const stranger = await signingKey("not-published");
const other = await signingKey("other-1");

function listen(server, port) {
  return new Promise((resolve) => server.listen(port, "127.0.0.1", () => resolve(server.address().port)));
}

function findAccount(_ctx, sub) {
  const user = users[sub];
  if (!user) return undefined;
  return {
    accountId: sub,
    async claims() {
      return {
        sub,
        email: user.email,
        email_verified: user.email_verified !== false,
        name: user.name || sub,
        groups: user.groups || [],
      };
    },
  };
}

function configuration(jwk) {
  return {
    clients: [
      {
        client_id: spec.client_id,
        client_secret: spec.client_secret,
        redirect_uris: [spec.redirect_uri],
        response_types: ["code"],
        grant_types: ["authorization_code"],
        token_endpoint_auth_method: "client_secret_basic",
      },
    ],
    jwks: { keys: [jwk] },
    findAccount,
    claims: {
      openid: ["sub"],
      email: ["email", "email_verified"],
      profile: ["name", "groups"],
    },
    conformIdTokenClaims: false, // the scopes' claims in the ID token, as most providers do
    pkce: { required: () => true },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    cookies: { keys: [crypto.randomBytes(32).toString("hex")] },
    ttl: { IdToken: spec.id_token_ttl || 3600, AccessToken: 600, Session: 3600, Grant: 3600, Interaction: 600 },
  };
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function page(res, status, html) {
  res.writeHead(status, { "content-type": "text/html; charset=utf-8" });
  res.end(`<!doctype html><html><head><title>Test provider</title></head><body>${html}</body></html>`);
}

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

async function interaction(provider, req, res, uid, isPost) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === "consent") {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    const missing = details.prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(" "));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    const grantId = await grant.save();
    const consent = details.grantId ? {} : { grantId };
    return provider.interactionFinished(req, res, { consent }, { mergeWithLastSubmission: true });
  }
  if (isPost) {
    const form = new URLSearchParams(await readBody(req));
    const login = form.get("login") || "";
    if (users[login]) {
      return provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
    }
  }
  return page(
    res,
    200,
    `<h1>Test provider sign-in</h1>${isPost ? "<p>No such user.</p>" : ""}` +
      `<form method="post" action="/interaction/${escape(uid)}">` +
      `<label>Username <input name="login" autocomplete="off"></label>` +
      `<button type="submit">Continue</button></form>`,
  );
}

async function badToken(idToken) {
  const claims = decodeJwt(idToken);
  const header = decodeProtectedHeader(idToken);
  const now = Math.floor(Date.now() / 1000);
  const sign = (payload, key, kid, alg = "RS256") =>
    new SignJWT(payload).setProtectedHeader({ alg, kid, typ: header.typ }).sign(key);
  switch (mischief) {
    case "forged":
      return sign(claims, attacker.privateKey, header.kid);
    case "unknown_key":
      return sign(claims, stranger.privateKey, "not-published");
    case "expired":
      return sign({ ...claims, iat: now - 7200, exp: now - 3600 }, main.privateKey, header.kid);
    case "wrong_audience":
      return sign({ ...claims, aud: "another-client" }, main.privateKey, header.kid);
    case "wrong_nonce":
      return sign({ ...claims, nonce: "not-the-nonce" }, main.privateKey, header.kid);
    case "other_issuer":
      return sign({ ...claims, iss: otherIssuer }, other.privateKey, "other-1");
    case "alg_none": {
      const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
      return `${b64({ alg: "none", typ: "JWT" })}.${b64(claims)}.`;
    }
    case "hs256_public": {
      const pem = await exportSPKI(main.publicKey);
      return sign(claims, new TextEncoder().encode(pem), header.kid, "HS256");
    }
    default:
      throw new Error(`unknown mischief ${mischief}`);
  }
}

const mainServer = http.createServer();
const otherServer = http.createServer();
const port = await listen(mainServer, spec.port || 0);
const otherPort = await listen(otherServer, 0);
const issuer = `http://127.0.0.1:${port}`;
const otherIssuer = `http://127.0.0.1:${otherPort}`;

const provider = new Provider(issuer, configuration(main.jwk));
const otherProvider = new Provider(otherIssuer, configuration(other.jwk));
for (const p of [provider, otherProvider]) {
  p.on("server_error", (_ctx, err) => process.stderr.write(`server_error ${err.stack}\n`));
}

provider.use(async (ctx, next) => {
  await next();
  if (ctx.path === "/token" && ctx.status === 200 && mischief && ctx.body && ctx.body.id_token) {
    ctx.body = { ...ctx.body, id_token: await badToken(ctx.body.id_token) };
    mischief = null;
  }
});

const mainCallback = provider.callback();
mainServer.on("request", async (req, res) => {
  try {
    const url = new URL(req.url, issuer);
    const match = url.pathname.match(/^\/interaction\/([^/]+)$/);
    if (match) return await interaction(provider, req, res, match[1], req.method === "POST");
    if (req.method === "POST" && url.pathname === "/_test/users") {
      users = JSON.parse(await readBody(req));
      return page(res, 200, "ok");
    }
    if (req.method === "POST" && url.pathname === "/_test/mischief") {
      mischief = JSON.parse(await readBody(req)).mode || null;
      return page(res, 200, "ok");
    }
    return mainCallback(req, res);
  } catch (err) {
    process.stderr.write(`${err.stack}\n`);
    if (!res.headersSent) page(res, 500, escape(err.message));
  }
});
otherServer.on("request", otherProvider.callback());

process.stdout.write(`${JSON.stringify({ issuer, other_issuer: otherIssuer })}\n`);
const stop = () => {
  mainServer.close();
  otherServer.close();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
