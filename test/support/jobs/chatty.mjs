// A job that writes a numbered line every few milliseconds until it is killed, and says so when
// asked to stop (then keeps writing: it ignores SIGTERM, so the agent's SIGKILL after the grace
// ends it), for the tests of shipping output written up to a kill.
//   node chatty.mjs [every-ms]
const every = Number(process.argv[2] ?? 5);
let n = 0;
process.on('SIGTERM', () => process.stdout.write(`got SIGTERM at line ${n}; not stopping\n`));
process.stderr.write('starting (this line is on stderr)\n');
setInterval(() => process.stdout.write(`line ${n++}\n`), every);
