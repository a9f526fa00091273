import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';

/**
 * A local HTTP server standing in for the instance metadata servers: EC2's IMDSv2 (a session
 * token from PUT /latest/api/token, then every GET with it; 401 without) and GCE's (every GET
 * with Metadata-Flavor: Google; 403 without). Notice bodies are the real ones in
 * test/fixtures/events/imds-*.json.
 */
const EVENTS = resolve(import.meta.dirname, '../fixtures/events');
export const IMDS_BODIES = {
  terminate: readFileSync(resolve(EVENTS, 'imds-spot-instance-action-terminate.json'), 'utf8'),
  stop: readFileSync(resolve(EVENTS, 'imds-spot-instance-action-stop.json'), 'utf8'),
  rebalance: readFileSync(resolve(EVENTS, 'imds-rebalance-recommendation.json'), 'utf8'),
};

export interface MetadataServer {
  readonly url: string;
  /** Paths (after /latest/ or /computeMetadata/v1/) and their bodies; change them while it runs. */
  readonly values: Map<string, string>;
  /** Every request: method, path and whether it carried a valid token or flavor header. */
  readonly requests: { method: string; path: string; authorised: boolean }[];
  /** Makes the current IMDS tokens invalid (as after their TTL). */
  expireTokens(): void;
  close(): Promise<void>;
}

export async function startMetadataServer(
  kind: 'aws' | 'gce',
  values: Record<string, string> = {},
  /** GCE: the instance identity token for an audience and format (`instance/service-accounts/default/identity`). */
  identity?: (audience: string, format: string) => string,
): Promise<MetadataServer> {
  const map = new Map(Object.entries(values));
  const requests: MetadataServer['requests'] = [];
  const tokens = new Set<string>();
  let n = 0;
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const send = (status: number, body = '', headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'text/plain', ...headers });
      res.end(body);
    };
    if (kind === 'aws') {
      if (req.method === 'PUT' && url.pathname === '/latest/api/token') {
        const ttl = Number(req.headers['x-aws-ec2-metadata-token-ttl-seconds']);
        requests.push({ method: 'PUT', path: 'api/token', authorised: ttl >= 1 && ttl <= 21_600 });
        if (!(ttl >= 1 && ttl <= 21_600)) return send(400);
        const token = `token-${++n}`;
        tokens.add(token);
        return send(200, token);
      }
      const path = url.pathname.replace(/^\/latest\//, '');
      const ok = tokens.has(String(req.headers['x-aws-ec2-metadata-token'] ?? ''));
      requests.push({ method: req.method ?? 'GET', path, authorised: ok });
      if (!ok) return send(401);
      const body = map.get(path);
      return body === undefined
        ? send(404, '<?xml version="1.0" encoding="iso-8859-1"?>\n<html><body><h1>404 - Not Found</h1></body></html>', {
            'content-type': 'text/html',
          })
        : send(200, body);
    }
    const path = url.pathname.replace(/^\/computeMetadata\/v1\//, '');
    const ok = req.headers['metadata-flavor'] === 'Google';
    requests.push({ method: req.method ?? 'GET', path, authorised: ok });
    if (!ok) return send(403, 'Missing Metadata-Flavor:Google header.');
    if (path === 'instance/service-accounts/default/identity' && identity) {
      const audience = url.searchParams.get('audience');
      if (!audience) return send(400, 'non-empty audience parameter required', { 'metadata-flavor': 'Google' });
      return send(200, identity(audience, url.searchParams.get('format') ?? 'standard'), { 'metadata-flavor': 'Google' });
    }
    const body = map.get(path);
    return body === undefined ? send(404, 'Not Found', { 'metadata-flavor': 'Google' }) : send(200, body, { 'metadata-flavor': 'Google' });
  };
  const server: Server = createServer(handle);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    values: map,
    requests,
    expireTokens: () => tokens.clear(),
    close: () =>
      new Promise((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}

/** What IMDS says about an EC2 spot instance of an Auto Scaling group. */
export function awsInstance(instanceId: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    'meta-data/instance-id': instanceId,
    'meta-data/placement/availability-zone': 'us-west-2a',
    'meta-data/placement/region': 'us-west-2',
    'meta-data/instance-type': 'p3.2xlarge',
    'meta-data/instance-life-cycle': 'spot',
    'meta-data/local-ipv4': '10.0.1.17',
    'meta-data/tags/instance/aws:autoscaling:groupName': 'gpu-v100-spot',
    ...extra,
  };
}

/** What the GCE metadata server says about a spot VM of a managed instance group. */
export function gceInstance(name: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    'instance/name': name,
    'instance/id': '4567890123456789012',
    'instance/zone': 'projects/123456789012/zones/us-central1-a',
    'instance/machine-type': 'projects/123456789012/machineTypes/a2-highgpu-1g',
    'instance/scheduling/provisioning-model': 'SPOT',
    'instance/scheduling/preemptible': 'TRUE',
    'instance/attributes/created-by': 'projects/123456789012/zones/us-central1-a/instanceGroupManagers/gpu-a100-spot',
    'instance/network-interfaces/0/ip': '10.128.0.9',
    'instance/preempted': 'FALSE',
    'instance/maintenance-event': 'NONE',
    ...extra,
  };
}
