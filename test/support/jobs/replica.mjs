// A small serving replica for the agent tests: answers its readiness path and a Prometheus
// /metrics page in vLLM's metric names (two label sets of the waiting gauge, summed by the agent),
// until it is stopped. It listens on every interface ($REPLICA_HOST to choose one), as a server in a container on the
// host's network must for the load balancer to reach it.
//   node replica.mjs <port> <waiting> <running>
import { createServer } from 'node:http';

const port = Number(process.argv[2]);
const waiting = Number(process.argv[3] ?? 0);
const running = Number(process.argv[4] ?? 0);
const metrics = [
  '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.',
  '# TYPE vllm:num_requests_waiting gauge',
  `vllm:num_requests_waiting{model_name="llama-3-8b",engine="0"} ${waiting - 1}`,
  `vllm:num_requests_waiting{model_name="llama-3-8b",engine="1"} 1`,
  '# HELP vllm:num_requests_running Number of requests currently running on GPU.',
  '# TYPE vllm:num_requests_running gauge',
  `vllm:num_requests_running{model_name="llama-3-8b",engine="0"} ${running}`,
  '',
].join('\n');
const server = createServer((req, res) => {
  if (req.url === '/metrics') {
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(metrics);
  } else if (req.url === '/health') {
    res.writeHead(200).end('ok');
  } else {
    res.writeHead(404).end();
  }
});
server.listen(port, process.env.REPLICA_HOST ?? '0.0.0.0');
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
