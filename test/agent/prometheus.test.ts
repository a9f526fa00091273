import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CloudWatchClient, PutMetricDataCommand } from '@aws-sdk/client-cloudwatch';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { scrapeReplica, scrapedSeries, seriesValues } from '../../agent/prometheus.ts';
import { CloudWatchServiceMetricSink } from '../../cloud/aws/cloudwatch-metrics.ts';
import { checkJobSpec, type JobSpec } from '../../core/job-spec.ts';

// The gauges vLLM's OpenAI server exposes on /metrics (names and help from vLLM's "Production Metrics" page; values made up).
const VLLM = `# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 12.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 4.0
vllm:num_requests_waiting{model_name="meta-llama/Meta-Llama-3-8B-Instruct-lora"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 0.62
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_count{model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 12.0
vllm:time_to_first_token_seconds_sum{model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 1.3
`;

function spec(port: number, targets: unknown[]): JobSpec {
  const check = checkJobSpec({
    name: 'chat',
    image: 'vllm/vllm-openai:v0.6.3',
    command: ['--port', String(port)],
    gpu: { kind: 'whole', count: 1 },
    service: { port, replicas: { min: 1, max: 4 }, targets },
  });
  if (!check.ok) throw new Error(check.errors.join('; '));
  return check.spec;
}

describe("a replica's own metrics (Prometheus text)", () => {
  it('sums a gauge over its label sets, and leaves out what is not exposed or not a gauge', () => {
    expect(
      seriesValues(VLLM, ['vllm:num_requests_waiting', 'vllm:num_requests_running', 'vllm:time_to_first_token_seconds', 'nope']),
    ).toEqual({ 'vllm:num_requests_waiting': 5, 'vllm:num_requests_running': 12 });
  });

  it('scrapes the replica’s endpoint for the series its targets name (vLLM’s by default, or its own)', async () => {
    const server = createServer((req, res) => {
      if (req.url === '/metrics') {
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
        res.end(`${VLLM}my_queue_depth 9\n`);
      } else {
        res.writeHead(404);
        res.end();
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    try {
      const both = spec(port, [
        { metric: 'waiting-requests', perReplica: 6 },
        { metric: 'running-requests', perReplica: 16 },
      ]);
      expect(scrapedSeries(both)).toEqual([
        { metric: 'waiting-requests', series: 'vllm:num_requests_waiting' },
        { metric: 'running-requests', series: 'vllm:num_requests_running' },
      ]);
      expect(await scrapeReplica(both)).toEqual({ 'waiting-requests': 5, 'running-requests': 12 });
      const own = spec(port, [{ metric: 'waiting-requests', perReplica: 6, prometheusMetric: 'my_queue_depth' }]);
      expect(await scrapeReplica(own)).toEqual({ 'waiting-requests': 9 });
      // Requests per second come from the load balancer, not the replica: nothing to scrape.
      expect(await scrapeReplica(spec(port, [{ metric: 'requests-per-second', perReplica: 2 }]))).toEqual({});
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
    // A replica still starting (nothing listening) gives nothing, quickly.
    expect(await scrapeReplica(spec(port, [{ metric: 'waiting-requests', perReplica: 6 }]), { timeoutMs: 500 })).toEqual({});
  });

  it('publishes each replica’s figure by service in the services’ namespace (the machines’ role may not put metrics there)', async () => {
    const cw = new CloudWatchClient({ region: 'us-west-2' });
    const mock = mockClient(cw);
    mock.on(PutMetricDataCommand).resolves({});
    await new CloudWatchServiceMetricSink(cw).put([
      { serviceId: 'nlp.chat', jobId: 'nlp.chat-r1', metric: 'waiting-requests', value: 5, atMs: Date.UTC(2026, 11, 2) },
      { serviceId: 'nlp.chat', jobId: 'nlp.chat-r1', metric: 'running-requests', value: 12, atMs: Date.UTC(2026, 11, 2) },
    ]);
    const input = mock.commandCalls(PutMetricDataCommand)[0]!.args[0].input;
    expect(input.Namespace).toBe('GpuFleet/Services');
    expect(input.MetricData!.map((d) => [d.MetricName, d.Dimensions, d.Value])).toEqual([
      ['ServiceWaitingRequests', [{ Name: 'Service', Value: 'nlp.chat' }], 5],
      ['ServiceRunningRequests', [{ Name: 'Service', Value: 'nlp.chat' }], 12],
    ]);
  });
});
