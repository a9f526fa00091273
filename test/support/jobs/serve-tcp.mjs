// Listens on the TCP port argv[2] on every address and answers each connection with "served", until stopped
// (a client that hangs up at once is no error).
import { createServer } from 'node:net';

createServer((socket) => {
  socket.on('error', () => {});
  socket.end('served');
}).listen(Number(process.argv[2]), '0.0.0.0', () => console.log('listening'));
