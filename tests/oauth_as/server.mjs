// A real OAuth 2.1 authorization server for mcp_trio's end-to-end authorization tests: oidc-provider
// (the certified OpenID Provider for Node.js) on 127.0.0.1, configured the way an MCP deployment needs it.
//
//   node server.mjs [--port N] [--scopes "mcp:tools mcp:admin"] [--access-token-ttl SECONDS]
//                   [--access-token-format jwt|opaque] [--resource URL]...
//
// - Listens on 127.0.0.1 only, on --port (default 0: a free port).  Once listening it prints one JSON
//   line on stdout, {"issuer": "http://127.0.0.1:PORT", "ready": true}; everything else goes to stderr.
// - Records what happens (registrations, authorization requests, logins, token grants and errors) as
//   a list of JSON objects ({"event": "grant.success", "grant_type": "refresh_token", ...}), served at
//   GET /_events (and logged on stderr), so that a test can count authorizations and token grants: an
//   event is recorded before the response of the request that caused it is sent.
// - Open dynamic client registration (RFC 7591): any client may register, as a public client
//   (token_endpoint_auth_method "none") or a confidential one.  Native clients (application_type
//   "native") may use loopback redirect URIs on any port (RFC 8252 7.3).
// - Authorization code flow only, PKCE with S256 required of every client.
// - Resource indicators (RFC 8707): the `resource` of the authorization and token requests becomes the
//   `aud` of a JWT access token (RFC 9068, signed RS256 with a key made at startup, published at
//   /jwks).  Any http(s) loopback URL is a resource unless --resource lists the accepted ones; every
//   resource has the scopes of --scopes.  With --access-token-format opaque the access tokens are
//   opaque strings instead (kept by the server, with the same `aud`), which only introspection explains.
// - Token introspection (RFC 7662) at /token/introspection for authenticated clients (a resource server
//   registers as a confidential client); JWT access tokens are not introspectable, opaque ones are.
//   Revocation (RFC 7009) at /token/revocation.
// - The authorization response carries `iss` (RFC 9207).
// - Refresh tokens: issued with every authorization code grant to a client that registered the
//   refresh_token grant type (an MCP client does not ask for offline_access); rotated on each use by
//   public clients.  They do not end with the login session.
// - Metadata at both /.well-known/oauth-authorization-server (RFC 8414) and
//   /.well-known/openid-configuration (oidc-provider serves both).
// - Login and consent are oidc-provider's development interactions: an HTML login form that accepts
//   any login name (the subject of the tokens) and any password, then a consent form.  A test drives
//   them with an HTTP client, as a browser would.
//
// SIGTERM or SIGINT closes the server and exits 0.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

// oidc-provider prints its notices with console.info: keep stdout for the ready line.
console.info = (...args) => console.error(...args);

const HOST = '127.0.0.1';
const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

function usage(message) {
  console.error(`server.mjs: ${message}`);
  console.error(
    'usage: node server.mjs [--port N] [--scopes "A B"] [--access-token-ttl SECONDS]'
    + ' [--access-token-format jwt|opaque] [--resource URL]...',
  );
  process.exit(2);
}

let options;
try {
  ({ values: options } = parseArgs({
    options: {
      port: { type: 'string', default: '0' },
      scopes: { type: 'string', default: 'mcp:tools mcp:admin' },
      'access-token-ttl': { type: 'string', default: '3600' },
      'access-token-format': { type: 'string', default: 'jwt' },
      resource: { type: 'string', multiple: true, default: [] },
    },
    strict: true,
    allowPositionals: false,
  }));
} catch (error) {
  usage(error.message);
}

const port = Number(options.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) usage(`--port: not a port number: ${options.port}`);
const accessTokenTTL = Number(options['access-token-ttl']);
if (!Number.isInteger(accessTokenTTL) || accessTokenTTL < 1) {
  usage(`--access-token-ttl: not a whole number of seconds >= 1: ${options['access-token-ttl']}`);
}
const accessTokenFormat = options['access-token-format'];
if (!['jwt', 'opaque'].includes(accessTokenFormat)) {
  usage(`--access-token-format: jwt or opaque, not ${accessTokenFormat}`);
}
const resourceScopes = options.scopes.split(' ').filter(Boolean);
if (resourceScopes.length === 0) usage('--scopes: no scope given');
const resources = new Set(options.resource);

const events = [];

function emit(record) {
  events.push(record);
  console.error(`server.mjs: ${JSON.stringify(record)}`);
}

function isLoopbackResource(identifier) {
  const url = URL.parse(identifier);
  return url !== null && ['http:', 'https:'].includes(url.protocol) && LOOPBACK_HOSTS.has(url.hostname);
}

function signingKeys() {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
  return { keys: [{ ...rsa, kid: randomBytes(8).toString('hex'), use: 'sig', alg: 'RS256' }] };
}

// The HTTP server exists (and has its port) before the provider, whose issuer names that port.
let handle = (_req, res) => {
  res.statusCode = 503;
  res.end();
};
const server = createServer((req, res) => {
  if (req.url === '/_events' && req.method === 'GET') {
    res.setHeader('content-type', 'application/json');
    res.setHeader('cache-control', 'no-store');
    res.end(JSON.stringify(events));
    return;
  }
  handle(req, res);
});

server.on('error', (error) => {
  console.error(`server.mjs: cannot listen on ${HOST}:${port}: ${error.message}`);
  process.exit(1);
});

server.listen(port, HOST, () => {
  const issuer = `http://${HOST}:${server.address().port}`;
  const provider = new Provider(issuer, {
    jwks: signingKeys(),
    cookies: { keys: [randomBytes(32).toString('hex')] },
    scopes: ['openid', 'offline_access', ...resourceScopes],
    responseTypes: ['code'],
    pkce: { required: () => true },
    clientDefaults: {
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'RS256',
    },
    features: {
      devInteractions: { enabled: true },
      registration: { enabled: true, initialAccessToken: false },
      revocation: { enabled: true },
      introspection: { enabled: true },
      resourceIndicators: {
        enabled: true,
        getResourceServerInfo: (_ctx, resourceIndicator) => {
          const known = resources.size ? resources.has(resourceIndicator) : isLoopbackResource(resourceIndicator);
          if (!known) {
            throw new Provider.errors.InvalidTarget(`unknown resource: ${resourceIndicator}`);
          }
          return {
            scope: resourceScopes.join(' '),
            audience: resourceIndicator,
            accessTokenTTL,
            accessTokenFormat,
            ...(accessTokenFormat === 'jwt' ? { jwt: { sign: { alg: 'RS256' } } } : {}),
          };
        },
      },
    },
    issueRefreshToken: (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    expiresWithSession: () => false,
    findAccount: (_ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
    ttl: {
      AccessToken: () => accessTokenTTL,
      AuthorizationCode: () => 60,
      Grant: () => 14 * 24 * 60 * 60,
      IdToken: () => 3600,
      Interaction: () => 3600,
      RefreshToken: () => 14 * 24 * 60 * 60,
      Session: () => 14 * 24 * 60 * 60,
    },
    renderError: (ctx, out) => {
      ctx.type = 'json';
      ctx.body = out;
    },
  });

  // What the tests count: one record per event, at GET /_events.
  const clientOf = (ctx) => ctx.oidc?.client?.clientId ?? ctx.oidc?.params?.client_id;
  provider.on('registration_create.success', (ctx, client) => emit({
    event: 'registration_create.success', client_id: client.clientId, application_type: client.applicationType,
  }));
  provider.on('authorization.accepted', (ctx) => emit({
    event: 'authorization.accepted', client_id: clientOf(ctx), scope: ctx.oidc.params.scope,
    resource: ctx.oidc.params.resource,
  }));
  provider.on('interaction.started', (ctx, prompt) => emit({
    event: 'interaction.started', client_id: clientOf(ctx), prompt: prompt.name,
  }));
  provider.on('authorization.success', (ctx) => emit({ event: 'authorization.success', client_id: clientOf(ctx) }));
  provider.on('grant.success', (ctx) => emit({
    event: 'grant.success', client_id: clientOf(ctx), grant_type: ctx.oidc.params.grant_type,
    resource: ctx.oidc.params.resource,
  }));
  for (const name of ['authorization.error', 'grant.error', 'registration_create.error', 'server_error']) {
    provider.on(name, (ctx, error) => emit({
      event: name, client_id: clientOf(ctx), error: error.error ?? error.name, description: error.error_description ?? error.message,
    }));
  }

  handle = provider.callback();
  process.stdout.write(`${JSON.stringify({ issuer, ready: true })}\n`);
});

function stop() {
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
