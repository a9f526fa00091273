// Listens on the TCP port argv[2] on every address and answers each connection with "served", until stopped.
import { createServer } from 'node:net';

createServer((socket) => socket.end('served')).listen(Number(process.argv[2]), '0.0.0.0', () => console.log('listening'));
