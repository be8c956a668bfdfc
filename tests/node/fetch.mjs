// Fetches URL N times at once through the proxy with undici's ProxyAgent (Node 20's global
// fetch ignores HTTPS_PROXY) and prints one JSON line per answer. Trust of Weir's CA comes
// from NODE_EXTRA_CA_CERTS only. Usage: node fetch.mjs PROXY_URL URL N
import { fetch, ProxyAgent } from 'undici';

const [proxy, url, n = '1'] = process.argv.slice(2);
if (!proxy || !url) {
  console.error('usage: node fetch.mjs PROXY_URL URL [N]');
  process.exit(2);
}
const dispatcher = new ProxyAgent(proxy);
const answers = await Promise.all(
  Array.from({ length: Number(n) }, async () => {
    const r = await fetch(url, { dispatcher });
    return { status: r.status, cacheStatus: r.headers.get('cache-status'), body: await r.text() };
  }),
);
for (const a of answers) console.log(JSON.stringify(a));
await dispatcher.close();
