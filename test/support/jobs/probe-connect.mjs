// A container's view of who it can open a TCP connection to: each argument is host:port; prints one
// JSON line mapping each to "open", or the error's code (ECONNREFUSED for a reject, ETIMEDOUT for a
// drop), and exits 0 whatever it found.
import { connect } from 'node:net';

const tries = process.argv.slice(2).map(
  (target) =>
    new Promise((resolve) => {
      const at = target.lastIndexOf(':');
      const socket = connect({ host: target.slice(0, at), port: Number(target.slice(at + 1)), timeout: 3000 });
      socket.once('connect', () => {
        socket.destroy();
        resolve([target, 'open']);
      });
      socket.once('timeout', () => {
        socket.destroy();
        resolve([target, 'ETIMEDOUT']);
      });
      socket.once('error', (e) => resolve([target, e.code ?? e.message]));
    }),
);
console.log(JSON.stringify(Object.fromEntries(await Promise.all(tries))));
