// The local stack's OpenID Connect provider: node-oidc-provider with Lakeport's test users,
// the portal and service clients, and a small login page of its own.
//
// Configuration comes from the Python launcher (devstack/oidc_provider.py) as one JSON
// document in LAKEPORT_OIDC_CONFIG:
// { port, issuer, audience, user_token_ttl, token_exchange_clients, cookie_keys, clients, users,
//   admin_secret }.
//
// While it runs, a user's groups can be changed and the user disabled or enabled again
// (PUT /lakeport-admin/users/<username>, JSON {"groups": [...], "enabled": true|false,
// "groups_claim": true|false}, with `Authorization: Bearer <admin_secret>`), as an administrator
// does at Keycloak: the next refresh grant's ID token carries the new groups, and a disabled user's
// refresh grant is refused. "groups_claim": false leaves the `groups` claim out of that user's
// tokens, as a Keycloak client without its group-membership mapper does (a misconfiguration the
// deployment check must name).
import { createHash, generateKeyPairSync, timingSafeEqual, verify } from 'node:crypto';

import { errors, Provider } from 'oidc-provider';

const config = JSON.parse(process.env.LAKEPORT_OIDC_CONFIG);

const usersBySub = new Map(config.users.map((user) => [user.sub, user]));
const usersByName = new Map(config.users.map((user) => [user.username, user]));

// Resource indicators must be absolute URIs; the audience ("lakekeeper") is not one.
const catalogResource = `urn:lakeport:${config.audience}`;
const catalogScope = 'lakekeeper';
// OAuth 2.0 Token Exchange (RFC 8693): a client allowed to (token_exchange_clients, the portal's
// service client) trades its own access token for a token acting as one of the users, e.g. for one
// execution. Such a token may be narrowed to one warehouse with a `warehouse:<uuid>` scope (dynamic,
// any warehouse id), a second layer the dev catalog enforces on top of the user's grants.
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const TOKEN_EXCHANGE_PARAMETERS = [
  'audience', 'requested_subject', 'requested_token_type', 'scope', 'subject_token', 'subject_token_type',
];
const WAREHOUSE_SCOPE = /^warehouse:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function log(message) {
  console.log(`${new Date().toISOString()} ${message}`);
}

function html(strings, ...values) {
  const escape = (value) => String(value)
    .replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;').replaceAll("'", '&#39;');
  return strings.reduce((out, text, i) => out + text + (i < values.length ? escape(values[i]) : ''), '');
}

function sha256(text) {
  return createHash('sha256').update(text, 'utf8').digest();
}

// Equal-length digests make the comparison constant-time whatever the lengths typed.
function passwordMatches(expected, candidate) {
  return timingSafeEqual(sha256(expected), sha256(candidate));
}

function checkCredentials(username, password) {
  const user = usersByName.get(username);
  // Compare even for unknown names so both failures take the same time.
  const matches = passwordMatches(user?.password ?? '', password);
  // Users without a password (test identities) cannot sign in, only be acted for.
  return user?.password && matches && user.enabled !== false ? user : undefined;
}

// A user the provider knows and has not disabled.
function enabledUser(sub) {
  const user = usersBySub.get(sub);
  return user && user.enabled !== false ? user : undefined;
}

// Warehouse scopes belong to exchanged user tokens only: a service token never carries one.
function refuseWarehouseScopes(ctx) {
  const requested = String(ctx.oidc.params?.scope ?? '').split(' ')
    .find((scope) => scope.startsWith('warehouse:'));
  if (requested) {
    throw new errors.InvalidScope('warehouse scopes are issued with a token exchange only', requested);
  }
}

// The one warehouse scope an exchange may ask for, if any; anything else is refused, not dropped.
function exchangeScope(scope) {
  const words = String(scope ?? '').split(' ').filter(Boolean);
  const unknown = words.find((word) => !WAREHOUSE_SCOPE.test(word));
  if (unknown) {
    throw new errors.InvalidScope('an exchanged token takes one scope at most: warehouse:<warehouse uuid>', unknown);
  }
  if (words.length > 1) {
    throw new errors.InvalidScope('an exchanged token is for one warehouse at most', words.join(' '));
  }
  return words[0];
}

function base64urlJson(part) {
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
}

// The subject token must be an access token this provider issued to the exchanging client itself
// (its client-credentials token): proof that the client holds it now, not a token of someone else.
function verifyOwnServiceToken(token, clientId) {
  const parts = String(token).split('.');
  let claims;
  try {
    if (parts.length !== 3 || base64urlJson(parts[0]).alg !== 'RS256'
        || !verify('RSA-SHA256', Buffer.from(`${parts[0]}.${parts[1]}`), keyPair.publicKey,
          Buffer.from(parts[2], 'base64url'))) {
      throw new Error('bad signature');
    }
    claims = base64urlJson(parts[1]);
  } catch {
    throw new errors.InvalidGrant('subject_token is not an access token of this provider');
  }
  if (claims.iss !== config.issuer || !(claims.exp > Date.now() / 1000)) {
    throw new errors.InvalidGrant('subject_token is expired or from another issuer');
  }
  if (claims.client_id !== clientId || claims.sub !== clientId) {
    throw new errors.InvalidGrant("subject_token must be the exchanging client's own token");
  }
}

async function tokenExchangeHandler(ctx) {
  const { client, params } = ctx.oidc;
  if (!config.token_exchange_clients.includes(client.clientId)) {
    throw new errors.UnauthorizedClient('this client may not exchange tokens');
  }
  for (const name of ['subject_token', 'subject_token_type', 'requested_subject', 'audience']) {
    if (!params[name]) {
      throw new errors.InvalidRequest(`missing required parameter '${name}'`);
    }
  }
  if (params.subject_token_type !== ACCESS_TOKEN_TYPE
      || (params.requested_token_type && params.requested_token_type !== ACCESS_TOKEN_TYPE)) {
    throw new errors.InvalidRequest(`only ${ACCESS_TOKEN_TYPE} is exchanged, and for one`);
  }
  if (params.audience !== config.audience) {
    throw new errors.InvalidTarget(`tokens are exchanged for the audience ${config.audience} only`);
  }
  verifyOwnServiceToken(params.subject_token, client.clientId);
  const user = enabledUser(params.requested_subject);
  if (!user) {
    throw new errors.InvalidGrant('requested_subject is not a user of this provider');
  }
  const scope = exchangeScope(params.scope);

  const token = new ctx.oidc.provider.AccessToken({
    accountId: user.sub, client, scope, gty: 'token_exchange',
  });
  token.resourceServer = {
    audience: config.audience,
    scope: scope ?? '',
    accessTokenFormat: 'jwt',
    accessTokenTTL: config.user_token_ttl,
    identifier: () => catalogResource,
    get scopes() { return new Set(this.scope.split(' ')); },
  };
  ctx.oidc.entity('AccessToken', token);
  const value = await token.save();
  log(`token exchange: ${client.clientId} acts as ${user.sub}${scope ? ` (${scope})` : ''}`);
  ctx.body = {
    access_token: value,
    issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: 'Bearer',
    expires_in: token.expiration,
    ...(scope ? { scope } : {}),
  };
}

function account(user) {
  return {
    accountId: user.sub,
    async claims() {
      // The library keeps only the claims of the scopes granted.
      return {
        sub: user.sub,
        name: user.name,
        preferred_username: user.username,
        email: user.email,
        email_verified: true,
        ...(user.groups_claim === false ? {} : { groups: user.groups || [] }),
      };
    },
  };
}

const PAGE_STYLE = `
  body { font-family: system-ui, sans-serif; background: #f3f5f8; color: #1b2430; margin: 0; }
  main { max-width: 22rem; margin: 4rem auto; background: #fff; padding: 2rem; border-radius: 8px;
         box-shadow: 0 1px 4px rgba(0, 0, 0, .15); }
  h1 { font-size: 1.4rem; margin-top: 0; }
  label { display: block; margin: .8rem 0 .3rem; }
  input { width: 100%; box-sizing: border-box; padding: .5rem; font-size: 1rem; }
  button { width: 100%; padding: .6rem; margin-top: 1rem; font-size: 1rem; border: 0; border-radius: 4px;
           background: #1f6feb; color: #fff; cursor: pointer; }
  button.secondary { background: #e6e9ee; color: #1b2430; margin-top: .5rem; }
  .error { color: #b42318; }`;

function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${html`${title}`} · Lakeport</title>
<style>${PAGE_STYLE}</style>
</head>
<body><main>
${body}
</main></body>
</html>`;
}

function loginPage(uid, { username = '', failed = false } = {}) {
  return page('Sign in', `<h1>Sign in to Lakeport</h1>
${failed ? '<p class="error" role="alert">Invalid username or password.</p>' : ''}
${html`<form id="login-form" method="post" action="/interaction/${uid}/login">
<label for="username">Username</label>
<input id="username" name="username" autocomplete="username" required autofocus value="${username}">
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>
<form id="cancel-form" method="post" action="/interaction/${uid}/abort">
<button type="submit" class="secondary">Cancel</button>
</form>`}`);
}

async function readBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 16 * 1024) {
      throw new errors.InvalidRequest('request body too large');
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

async function readForm(req) {
  return new URLSearchParams(await readBody(req));
}

// Every client registered here belongs to Lakeport itself, so the user's consent is implied:
// the grant covers whatever the client asked for and no consent screen is needed.
async function loadExistingGrant(ctx) {
  const { oidc } = ctx;
  const grantId = oidc.result?.consent?.grantId || oidc.session.grantIdFor(oidc.client.clientId);
  const grant = (grantId && await oidc.provider.Grant.find(grantId))
    || new oidc.provider.Grant({ clientId: oidc.client.clientId, accountId: oidc.session.accountId });

  grant.addOIDCScope(oidc.requestParamOIDCScopes);
  grant.addOIDCClaims(oidc.requestParamClaims);
  for (const [indicator, resourceServer] of Object.entries(oidc.resourceServers)) {
    const requested = [...oidc.requestParamScopes].filter((scope) => resourceServer.scopes.has(scope));
    if (requested.length) {
      grant.addResourceScope(indicator, requested);
    }
  }
  await grant.save();
  return grant;
}

const keyPair = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...keyPair.privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256' };

const provider = new Provider(config.issuer, {
  clients: config.clients,
  jwks: { keys: [signingKey] },
  // Read at every grant, a refresh included (its ID token's claims come from here): a change made
  // through /lakeport-admin shows at the next refresh, and a disabled user's grants are refused
  // (oidc-provider answers invalid_grant when the account is not found).
  findAccount: (ctx, sub) => {
    const user = enabledUser(sub);
    return user && account(user);
  },
  claims: {
    openid: ['sub'],
    profile: ['name', 'preferred_username', 'groups'],
    email: ['email', 'email_verified'],
  },
  // Access tokens are for the catalog, which /userinfo refuses; the id_token carries the profile.
  conformIdTokenClaims: false,
  // Lakekeeper names the users it sees after these access-token claims. An exchanged token
  // names the client acting for the user (RFC 8693 `act`).
  extraTokenClaims(ctx, token) {
    const user = token.accountId && usersBySub.get(token.accountId);
    if (!user) {
      return undefined;
    }
    const actor = token.gty === 'token_exchange' ? { act: { sub: token.clientId } } : {};
    return { name: user.name, email: user.email, preferred_username: user.username, ...actor };
  },
  loadExistingGrant,
  // offline_access needs prompt=consent (OpenID Connect Core), a screen this provider never
  // shows; the portal gets refresh tokens that live as long as the provider session instead.
  issueRefreshToken: (ctx, client) => client.grantTypeAllowed('refresh_token'),
  pkce: { required: () => true },
  clientBasedCORS: () => false,
  cookies: {
    keys: config.cookie_keys,
    // Browsers share cookies across ports of one host: names carry the port so that
    // two stacks on 127.0.0.1 do not overwrite each other's provider sessions.
    names: {
      session: `lakeport_op_${config.port}_session`,
      interaction: `lakeport_op_${config.port}_interaction`,
      resume: `lakeport_op_${config.port}_resume`,
    },
  },
  ttl: {
    AccessToken: (ctx, token) => token.resourceServer?.accessTokenTTL ?? 60 * 60,
    AuthorizationCode: 60,
    ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL ?? 60 * 60,
    IdToken: 60 * 60,
    Interaction: 10 * 60,
    Session: 12 * 60 * 60,
    Grant: 24 * 60 * 60,
    RefreshToken: 24 * 60 * 60,
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => catalogResource,
      useGrantedResource: () => true,
      getResourceServerInfo(ctx, indicator) {
        if (indicator !== catalogResource) {
          throw new errors.InvalidTarget();
        }
        refuseWarehouseScopes(ctx);
        return {
          scope: catalogScope,
          audience: config.audience,
          accessTokenFormat: 'jwt',
          accessTokenTTL: 60 * 60,
        };
      },
    },
    rpInitiatedLogout: {
      enabled: true,
      // A dev provider asks nothing: the confirmation form submits itself, with logout=yes so
      // the whole provider session ends (not just this client's grant).
      async logoutSource(ctx, form) {
        const confirmation = form.replace('</form>', '<input type="hidden" name="logout" value="yes"/></form>');
        ctx.body = page('Signing out', `<h1>Signing out…</h1>
${confirmation}
<noscript><button type="submit" form="op.logoutForm">Sign out</button></noscript>
<script>document.forms[0].submit();</script>`);
      },
      async postLogoutSuccessSource(ctx) {
        ctx.body = page('Signed out', '<h1>You are signed out.</h1>');
      },
    },
  },
  async renderError(ctx, out) {
    ctx.type = 'html';
    ctx.body = page('Sign-in error', html`<h1>Sign-in error</h1>
<p class="error">${out.error_description ?? 'The request could not be processed.'}</p>
<p><code>${out.error}</code></p>`);
  },
});

provider.registerGrantType(TOKEN_EXCHANGE, tokenExchangeHandler, TOKEN_EXCHANGE_PARAMETERS);

provider.on('server_error', (ctx, err) => log(`server error: ${err.stack}`));
provider.on('grant.error', (ctx, err) => log(`token request refused: ${err.error} (${err.error_detail ?? err.error_description})`));
provider.on('authorization.error', (ctx, err) => log(`authorization refused: ${err.error} (${err.error_detail ?? err.error_description})`));

// Only method, path and status: query strings and bodies carry codes, tokens and passwords,
// and interaction ids in paths are handles on sign-ins in progress.
provider.use(async (ctx, next) => {
  const started = Date.now();
  try {
    await next();
  } finally {
    const path = ctx.path.replace(/^\/(interaction|auth)\/[\w-]+/, '/$1/:uid');
    log(`${ctx.method} ${path} ${ctx.status} ${Date.now() - started}ms`);
  }
});

// --- Administration while it runs: a user's groups, enabled or disabled --------------------------

const ADMIN_PATH = /^\/lakeport-admin\/users\/([\w.@-]{1,64})$/;
const MAX_GROUPS = 200;

function adminAllowed(ctx) {
  const [scheme, presented] = String(ctx.get('authorization')).split(' ');
  return Boolean(config.admin_secret) && scheme === 'Bearer' && passwordMatches(config.admin_secret, presented ?? '');
}

function parseChange(form) {
  const change = {};
  if (form.groups !== undefined) {
    if (!Array.isArray(form.groups) || form.groups.length > MAX_GROUPS
        || !form.groups.every((group) => typeof group === 'string' && group.length > 0 && group.length <= 255)) {
      throw new errors.InvalidRequest(`groups: a list of at most ${MAX_GROUPS} names of 1-255 characters`);
    }
    change.groups = [...new Set(form.groups)];
  }
  if (form.enabled !== undefined) {
    if (typeof form.enabled !== 'boolean') {
      throw new errors.InvalidRequest('enabled: true or false');
    }
    change.enabled = form.enabled;
  }
  if (form.groups_claim !== undefined) {
    if (typeof form.groups_claim !== 'boolean') {
      throw new errors.InvalidRequest('groups_claim: true or false');
    }
    change.groups_claim = form.groups_claim;
  }
  return change;
}

async function handleAdmin(ctx, username) {
  if (!adminAllowed(ctx)) {
    ctx.status = 401;
    ctx.body = { error: 'invalid_token' };
    return;
  }
  const user = usersByName.get(username);
  if (!user) {
    ctx.status = 404;
    ctx.body = { error: 'no such user' };
    return;
  }
  if (ctx.method === 'PUT') {
    const body = await readBody(ctx.req);
    let form;
    try {
      form = JSON.parse(body);
    } catch {
      form = undefined;
    }
    if (!form || typeof form !== 'object' || Array.isArray(form)) {
      throw new errors.InvalidRequest('a JSON object is expected');
    }
    Object.assign(user, parseChange(form));
    log(`admin: user ${username} changed (groups ${JSON.stringify(user.groups)}, enabled ${user.enabled !== false})`);
  } else if (ctx.method !== 'GET') {
    ctx.status = 405;
    return;
  }
  ctx.body = { username, groups: user.groups ?? [], enabled: user.enabled !== false,
               ...(user.groups_claim === false ? { groups_claim: false } : {}) };
}

provider.use(async (ctx, next) => {
  const match = ADMIN_PATH.exec(ctx.path);
  if (!match) {
    await next();
    return;
  }
  ctx.set('cache-control', 'no-store');
  try {
    await handleAdmin(ctx, match[1]);
  } catch (err) {
    if (!(err instanceof errors.OIDCProviderError)) {
      throw err;
    }
    ctx.status = err.statusCode;
    ctx.body = { error: err.error, error_description: err.error_description };
  }
});

const INTERACTION_PATH = /^\/interaction\/([\w-]+)(?:\/(login|abort))?$/;

async function handleInteraction(ctx, uid, action) {
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  if (details.uid !== uid) {
    throw new errors.SessionNotFound('interaction does not match this browser');
  }
  if (details.prompt.name !== 'login') {
    throw new errors.InvalidRequest(`unsupported prompt ${details.prompt.name}`);
  }

  if (ctx.method === 'GET' && !action) {
    ctx.body = loginPage(uid);
    return;
  }
  if (ctx.method !== 'POST' || !action) {
    ctx.status = 405;
    return;
  }

  let result;
  if (action === 'abort') {
    result = { error: 'access_denied', error_description: 'End-User aborted interaction' };
  } else {
    const form = await readForm(ctx.req);
    const username = form.get('username') ?? '';
    const user = checkCredentials(username, form.get('password') ?? '');
    if (!user) {
      ctx.body = loginPage(uid, { username, failed: true });
      return;
    }
    result = { login: { accountId: user.sub } };
  }
  ctx.status = 303;
  ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false }));
}

provider.use(async (ctx, next) => {
  const match = INTERACTION_PATH.exec(ctx.path);
  if (!match) {
    await next();
    return;
  }
  ctx.set('cache-control', 'no-store');
  ctx.type = 'html';
  try {
    await handleInteraction(ctx, match[1], match[2]);
  } catch (err) {
    if (!(err instanceof errors.OIDCProviderError)) {
      throw err;
    }
    ctx.status = err.statusCode;
    ctx.body = page('Sign-in error', html`<h1>This sign-in request cannot continue</h1>
<p class="error">${err.error_description}</p>
<p>Go back to Lakeport and sign in again.</p>`);
  }
});

const server = provider.listen(config.port, '127.0.0.1', () => {
  log(`OpenID Connect provider ${config.issuer} ready`);
});

function shutdown(signal) {
  log(`${signal} received, stopping`);
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
