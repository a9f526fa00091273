// A container's view of a metadata server: who it runs as, what it may do, and whether it reaches
// http://<address>/ (argv[2]). It writes a file into its checkpoint folder, as a job does. Prints one
// JSON line and exits 0 whatever it found.
import { readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';

const address = process.argv[2];
const status = readFileSync('/proc/self/status', 'utf8');
const field = (name) => status.match(new RegExp(`^${name}:\\s*(\\S+)`, 'm'))?.[1];
let wrote;
try {
  writeFileSync(join(process.env.GPU_FLEET_CHECKPOINT_DIR, 'probe.txt'), 'written by the job');
  wrote = true;
} catch {
  wrote = false;
}
const reached = await new Promise((resolve) => {
  const req = request({ host: address, port: 80, path: '/latest/meta-data/iam/security-credentials/', timeout: 3000 }, (res) => {
    let body = '';
    res.on('data', (b) => (body += b));
    res.on('end', () => resolve({ reached: true, body }));
  });
  req.on('timeout', () => req.destroy(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })));
  req.on('error', (e) => resolve({ reached: false, error: e.code ?? e.message }));
  req.end();
});
console.log(JSON.stringify({ uid: process.getuid(), capEff: field('CapEff'), noNewPrivs: field('NoNewPrivs'), wrote, ...reached }));
