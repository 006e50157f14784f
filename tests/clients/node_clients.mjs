// node-redis (RESP2 and RESP3) and ioredis against memproxy: every MEM.* verb, ordinary traffic,
// pipelines, transactions and pub/sub. usage: node node_clients.mjs PORT
import { createClient } from 'redis';
import Redis from 'ioredis';

const port = Number(process.argv[2]);
const tag = `js${process.pid}`;
let checks = 0;
const ok = (cond, what) => { checks++; if (!cond) throw new Error(`failed: ${what}`); };
const asMap = (v) => {
  if (v instanceof Map) return Object.fromEntries(v);
  if (Array.isArray(v)) { const o = {}; for (let i = 0; i < v.length; i += 2) o[String(v[i])] = v[i + 1]; return o; }
  return v;
};

async function everyVerb(call, label) {
  const user = `${tag}-${label}`, thread = `${tag}-t-${label}`;
  ok(String(await call(['MEM.PING'])) === 'PONG', `${label} MEM.PING`);
  const rem = asMap(await call(['MEM.REMEMBER', 'The user sails every weekend.', 'USER', user, 'KIND', 'semantic']));
  ok(String(rem.id).length === 12, `${label} MEM.REMEMBER ${JSON.stringify(rem)}`);
  const again = asMap(await call(['MEM.REMEMBER', 'The user sails every weekend!', 'USER', user, 'KIND', 'semantic']));
  ok(Number(again.deduped) === 1, `${label} dedup`);
  const hits = await call(['MEM.RECALL', 'Does the user like boats?', 'USER', user]);
  ok(hits.length === 1 && String(asMap(hits[0]).text) === 'The user sails every weekend.', `${label} MEM.RECALL`);
  for (const mode of ['keyword', 'hybrid']) {
    ok((await call(['MEM.RECALL', 'sails weekend', 'USER', user, 'MODE', mode])).length === 1, `${label} ${mode}`);
  }
  ok(Number(asMap(await call(['MEM.SESSION', 'START', thread, 'USER', user])).created) === 1, `${label} SESSION START`);
  ok(String(await call(['MEM.SESSION', 'SCRATCHPAD', thread, 'notes'])) === 'OK', `${label} SCRATCHPAD`);
  ok(String(await call(['MEM.SESSION', 'GOAL', thread, 'a goal'])) === 'OK', `${label} GOAL`);
  const t = asMap(await call(['MEM.TURN', thread, 'user', 'Does the user go sailing on weekends?', 'USER', user]));
  ok(Number(t.turn_count) === 1 && t.recalled.length === 1, `${label} MEM.TURN`);
  ok(String(asMap(await call(['MEM.SESSION', 'GET', thread])).goal) === 'a goal', `${label} SESSION GET`);
  ok((await call(['MEM.EVENTS', thread])).length >= 3, `${label} MEM.EVENTS`);
  ok((await call(['MEM.LIST', 'USER', user])).length === 2, `${label} MEM.LIST`);
  ok(Number(asMap(await call(['MEM.INFO'])).dim) === 384, `${label} MEM.INFO`);
  ok((await call(['MEM.EMBED', 'hello'])).length === 384, `${label} MEM.EMBED`);
  ok((await call(['MEM.HELP'])).some((l) => String(l).includes('MEM.RECALL')), `${label} MEM.HELP`);
  ok(Number(await call(['MEM.FORGET', String(rem.id)])) === 1, `${label} MEM.FORGET id`);
  ok(Number(await call(['MEM.FORGET', 'USER', user])) === 1, `${label} MEM.FORGET USER`);
  ok(Number(await call(['MEM.SESSION', 'END', thread])) === 1, `${label} SESSION END`);
  let refused = false;
  try { await call(['MEM.RECALL', 'x', 'K', '0']); } catch (e) { refused = String(e.message).includes('K must be an integer'); }
  ok(refused, `${label} error reply`);
}

for (const RESP of [2, 3]) {
  const c = createClient({ url: `redis://127.0.0.1:${port}`, RESP });
  await c.connect();
  await everyVerb((args) => c.sendCommand(args), `node-redis-resp${RESP}`);
  const k = `${tag}:nr${RESP}`;
  await c.set(k, '1');
  const multi = await c.multi().incr(k).incr(k).exec();
  ok(multi.map(Number).join() === '2,3', `node-redis MULTI ${multi}`);
  const piped = await Promise.all([c.incr(k), c.sendCommand(['MEM.PING']), c.get(k)]);
  ok(Number(piped[0]) === 4 && String(piped[2]) === '4', 'node-redis pipelined');
  const sub = c.duplicate();
  await sub.connect();
  const got = new Promise((resolve) => sub.subscribe(`${tag}-chan`, resolve));
  await new Promise((r) => setTimeout(r, 100));
  await c.publish(`${tag}-chan`, 'hi');
  ok((await got) === 'hi', 'node-redis pub/sub');
  await sub.quit();
  await c.quit();
}

const io = new Redis({ port, host: '127.0.0.1', lazyConnect: true });
await io.connect();
await everyVerb((args) => io.call(args[0], ...args.slice(1)), 'ioredis');
const k = `${tag}:io`;
const pipe = await io.pipeline().set(k, '1').incr(k).call('MEM.PING').get(k).exec();
ok(pipe[1][1] === 2 && pipe[2][1] === 'PONG' && pipe[3][1] === '2', `ioredis pipeline ${JSON.stringify(pipe)}`);
const tx = await io.multi().incr(k).incr(k).exec();
ok(tx[1][1] === 4, 'ioredis MULTI');
const subIo = new Redis({ port, host: '127.0.0.1' });
await subIo.subscribe(`${tag}-io`);
const msg = new Promise((resolve) => subIo.on('message', (_ch, m) => resolve(m)));
await io.publish(`${tag}-io`, 'hey');
ok((await msg) === 'hey', 'ioredis pub/sub');
subIo.disconnect();
io.disconnect();
console.log(`node-redis + ioredis: ${checks} passed, 0 failed`);
