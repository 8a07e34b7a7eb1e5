import { FakeGithub } from "./fake-github.js";

/**
 * GitHub on loopback as a process, for tests of other packages (the CLI's end-to-end tests
 * cannot import the cp): `node fake-github-main.js DIR OWNER/REPO...` creates the repositories,
 * writes the app's private key under DIR, prints one JSON line (url, app id, webhook secret, key
 * file, a token for the test's own git and API calls), and serves until SIGTERM. The test reads
 * what happened at GET /_fake/state and sets the webhook URL with PUT /_fake/webhook-url.
 */
const [dir, ...repos] = process.argv.slice(2);
if (!dir) throw new Error("usage: fake-github-main DIR OWNER/REPO...");
const gh = await FakeGithub.start();
for (const r of repos) await gh.createRepository(r);
process.stdout.write(
  `${JSON.stringify({
    url: gh.url,
    appId: gh.appId,
    installationId: gh.installationId,
    webhookSecret: gh.webhookSecret,
    privateKeyFile: await gh.writePrivateKey(dir),
    token: gh.issueToken(),
  })}\n`,
);
process.on("SIGTERM", () => {
  void gh.close().then(() => process.exit(0));
});
