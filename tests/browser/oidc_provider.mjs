// A real OpenID Provider for the single sign-on browser test (tests/browser/test_sso.py): oidc-provider, the
// version package.json pins, on 127.0.0.1 only. One confidential client and fixed accounts; its development
// login form takes an account id as the login (any password). Usage:
//   node tests/browser/oidc_provider.mjs PORT REDIRECT_URI CLIENT_SECRET
// Prints "ready ISSUER" on stdout once it listens.
import Provider from 'oidc-provider';

const [port, redirectUri, clientSecret] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

// Two learners the provider calls "Ana" (two people, two subjects) and a teacher by the group claim, whose
// name is markup: the app must show it as text.
const ACCOUNTS = {
  'ana-1': { name: 'Ana', preferred_username: 'ana.one', groups: ['class-7'] },
  'ana-2': { name: 'Ana', preferred_username: 'ana.two', groups: ['class-7'] },
  'teach-1': { name: 'Ms **T** <b>bold</b>', preferred_username: 'ms.t', groups: ['class-7', 'kvlab-teachers'] },
};

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'kvlab',
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
  }],
  claims: { openid: ['sub'], profile: ['name', 'preferred_username', 'groups'], email: ['email'] },
  conformIdTokenClaims: false, // the profile claims go into the ID token, which is what st.user shows
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ['kvlab-test-provider-cookie-key'] },
  async findAccount(ctx, id) {
    if (!ACCOUNTS[id]) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...ACCOUNTS[id] }; } };
  },
  // A first-party client: the learner is not asked to consent (the school's provider usually does the same).
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid profile email');
    await grant.save();
    return grant;
  },
});
provider.listen(Number(port), '127.0.0.1', () => console.log(`ready ${issuer}`));
