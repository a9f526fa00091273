// A two-machine gang's meeting, as torch.distributed's rendezvous does it: the first rank listens
// on $GPU_FLEET_LEADER_PORT on every interface of its machine; every other rank connects to
// $GPU_FLEET_LEADER_ADDRESS:$GPU_FLEET_LEADER_PORT (trying again while the leader starts), sends
// a line, and prints what the leader answers. The leader answers each rank and ends once all have met.
//   node gang-rendezvous.mjs
import { createConnection, createServer } from 'node:net';

const rank = Number(process.env.GPU_FLEET_NODE_RANK ?? 0);
const size = Number(process.env.GPU_FLEET_NUM_NODES ?? 1);
const port = Number(process.env.GPU_FLEET_LEADER_PORT);
const address = process.env.GPU_FLEET_LEADER_ADDRESS;
const say = (o) => console.log(JSON.stringify({ rank, ...o }));
say({ event: 'start', address, port, size });

if (rank === 0) {
  let met = 0;
  const server = createServer((socket) => {
    socket.setEncoding('utf8');
    socket.once('data', (line) => {
      say({ event: 'heard', line: line.trim() });
      socket.end(`welcome ${line.trim()}, from the leader\n`);
      if (++met === size - 1) server.close(() => process.exit(0));
    });
  });
  server.listen(port, '0.0.0.0', () => say({ event: 'listening' }));
} else {
  const until = Date.now() + 60_000;
  const attempt = () => {
    const socket = createConnection({ host: address, port });
    socket.setEncoding('utf8');
    socket.once('connect', () => socket.write(`rank ${rank}\n`));
    socket.once('data', (line) => {
      say({ event: 'met', reply: line.trim() });
      socket.end();
      process.exit(0);
    });
    socket.once('error', (e) => {
      if (Date.now() > until) {
        say({ event: 'gave-up', error: e.message });
        process.exit(3);
      }
      setTimeout(attempt, 200);
    });
  };
  attempt();
}
