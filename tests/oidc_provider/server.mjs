// A real OpenID Connect provider for Loop's sign-in tests: the certified `oidc-provider`, with
// its own login and consent forms (devInteractions), one confidential client that must use PKCE,
// RS256 keys made at start, and people read afresh from a JSON file at every look-up, so a test
// removes a person by editing the file. Configured by the environment:
//   OIDC_PORT, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_REDIRECT_URI, OIDC_ACCOUNTS (the file).
import { readFileSync } from 'node:fs';

import { exportJWK, generateKeyPair } from 'jose';
import Provider from 'oidc-provider';

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} must be set`);
    process.exit(2);
  }
  return value;
};

const port = Number(env('OIDC_PORT'));
const issuer = `http://127.0.0.1:${port}`;

// [{sub, preferred_username, email, name, groups}]: read at every look-up, never cached.
function person(sub) {
  const people = JSON.parse(readFileSync(env('OIDC_ACCOUNTS'), 'utf8'));
  return people.find((one) => one.sub === sub);
}

const { privateKey } = await generateKeyPair('RS256', { extractable: true });
const jwk = { ...(await exportJWK(privateKey)), kid: 'test-key', alg: 'RS256', use: 'sig' };

const provider = new Provider(issuer, {
  clients: [{
    client_id: env('OIDC_CLIENT_ID'),
    client_secret: env('OIDC_CLIENT_SECRET'),
    redirect_uris: [env('OIDC_REDIRECT_URI')],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
  }],
  jwks: { keys: [jwk] },
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name', 'groups'],
  },
  // The ID token carries the claims too (Loop reads both, the userinfo's over the token's).
  conformIdTokenClaims: false,
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  async findAccount(ctx, sub) {
    // devInteractions' login form takes any login: only the people in the file exist.
    if (!person(sub)) return undefined;
    return {
      accountId: sub,
      async claims() {
        const found = person(sub) ?? { sub };
        return { email_verified: true, ...found, sub };
      },
    };
  },
});
provider.proxy = false;

provider.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider listening at ${issuer}`);
});
