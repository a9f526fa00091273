import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { AwsImds, detectMetadata, GceMetadata, waitOutWarmPool } from '../../agent/metadata.ts';
import { awsInstance, gceInstance, IMDS_BODIES, startMetadataServer, type MetadataServer } from '../support/metadata-server.ts';

const servers: MetadataServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
async function server(kind: 'aws' | 'gce', values: Record<string, string>): Promise<MetadataServer> {
  const s = await startMetadataServer(kind, values);
  servers.push(s);
  return s;
}

/** A local port with nothing listening. */
async function closedPort(): Promise<string> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return `http://127.0.0.1:${port}`;
}

describe('instance metadata: AWS IMDSv2', () => {
  it('takes a session token first, then reads who the machine is with it', async () => {
    const s = await server('aws', awsInstance('i-0abc123def4567890'));
    const imds = new AwsImds(s.url);
    expect(await imds.identity()).toEqual({
      cloud: 'aws',
      instanceId: 'i-0abc123def4567890',
      region: 'us-west-2',
      zone: 'us-west-2a',
      instanceType: 'p3.2xlarge',
      capacityType: 'spot',
      groupId: 'gpu-v100-spot',
      privateIp: '10.0.1.17',
    });
    expect(s.requests[0]).toEqual({ method: 'PUT', path: 'api/token', authorised: true });
    expect(s.requests.slice(1).every((r) => r.authorised)).toBe(true);
    expect(s.requests.filter((r) => r.method === 'PUT')).toHaveLength(1); // one token for all reads
  });

  it('in a warm pool, waits without registering until the machine is started into service; outside a group, goes on at once', async () => {
    const s = await server('aws', awsInstance('i-warm', { 'meta-data/autoscaling/target-lifecycle-state': 'Warmed:Stopped' }));
    const imds = new AwsImds(s.url);
    const said: string[] = [];
    let polls = 0;
    const state = await waitOutWarmPool(imds, { info: (m) => said.push(m) }, async () => {
      polls++;
      // Stopped while waiting, then started from the pool: the next boot's state is InService.
      if (polls === 3) s.values.set('meta-data/autoscaling/target-lifecycle-state', 'InService');
    });
    expect(state).toBe('InService');
    expect(polls).toBe(3);
    expect(said).toEqual(['in the group’s warm pool: not registering until the machine is started into service']);
    s.values.delete('meta-data/autoscaling/target-lifecycle-state');
    expect(await waitOutWarmPool(imds, { info: (m) => said.push(m) }, async () => expect.unreachable())).toBeUndefined();
  });

  it('reads the real spot instance-action and rebalance bodies as notices; 404 means none', async () => {
    const s = await server('aws', awsInstance('i-1'));
    const imds = new AwsImds(s.url);
    expect(await imds.notices(0)).toEqual([]);
    s.values.set('meta-data/events/recommendations/rebalance', IMDS_BODIES.rebalance);
    expect(await imds.notices(0)).toEqual([
      { kind: 'rebalance', noticedAtMs: Date.parse('2020-10-27T08:22:00Z'), source: 'events/recommendations/rebalance' },
    ]);
    s.values.set('meta-data/spot/instance-action', IMDS_BODIES.terminate);
    expect((await imds.notices(0))[0]).toEqual({
      kind: 'interruption',
      action: 'terminate',
      actionAtMs: Date.parse('2017-09-18T08:22:00Z'),
      source: 'spot/instance-action',
    });
    s.values.set('meta-data/spot/instance-action', IMDS_BODIES.stop);
    expect((await imds.notices(0))[0]).toMatchObject({ action: 'stop' });
    s.values.set('meta-data/spot/instance-action', '{"action": "terminate"}');
    await expect(imds.notices(0)).rejects.toThrow('spot/instance-action is not {"action", "time"}');
  });

  it('takes a new token when the old one is refused', async () => {
    const s = await server('aws', awsInstance('i-1'));
    const imds = new AwsImds(s.url);
    await imds.get('meta-data/instance-id');
    s.expireTokens();
    expect(await imds.get('meta-data/instance-id')).toBe('i-1');
    expect(s.requests.filter((r) => r.method === 'PUT')).toHaveLength(2);
  });

  it('renews the token before it expires, on the agent clock', async () => {
    const s = await server('aws', awsInstance('i-1'));
    let now = 0;
    const imds = new AwsImds(s.url, {}, () => now);
    await imds.get('meta-data/instance-id');
    now += 6 * 3600_000 - 30_000; // within the last minute of its six hours
    await imds.get('meta-data/instance-id');
    expect(s.requests.filter((r) => r.method === 'PUT')).toHaveLength(2);
  });

  it('works without instance tags in metadata: the node group then comes from configuration', async () => {
    const values = awsInstance('i-2');
    delete values['meta-data/tags/instance/aws:autoscaling:groupName'];
    const s = await server('aws', values);
    const id = await new AwsImds(s.url).identity();
    expect(id.groupId).toBeUndefined();
    expect(id.instanceId).toBe('i-2');
  });
});

describe('instance metadata: GCE', () => {
  it('reads a spot VM of a managed instance group with the Metadata-Flavor header', async () => {
    const s = await server('gce', gceInstance('gpu-a100-spot-x7kq'));
    expect(await new GceMetadata(s.url).identity()).toEqual({
      cloud: 'gcp',
      instanceId: 'gpu-a100-spot-x7kq',
      region: 'us-central1',
      zone: 'us-central1-a',
      instanceType: 'a2-highgpu-1g',
      capacityType: 'spot',
      groupId: 'gpu-a100-spot',
      privateIp: '10.128.0.9',
    });
    expect(s.requests.every((r) => r.authorised)).toBe(true);
  });

  it('turns instance/preempted=TRUE into an interruption and host maintenance into a rebalance', async () => {
    const s = await server('gce', gceInstance('vm-1'));
    const gce = new GceMetadata(s.url);
    expect(await gce.notices(1000)).toEqual([]);
    s.values.set('instance/preempted', 'TRUE');
    s.values.set('instance/maintenance-event', 'TERMINATE_ON_HOST_MAINTENANCE');
    expect(await gce.notices(1000)).toEqual([
      { kind: 'interruption', action: 'preempted', actionAtMs: 31_000, source: 'instance/preempted' },
      { kind: 'rebalance', noticedAtMs: 1000, source: 'instance/maintenance-event' },
    ]);
  });
});

describe('finding the cloud', () => {
  it('asks both servers at once and takes the one that answers', async () => {
    const aws = await server('aws', awsInstance('i-9'));
    const gce = await server('gce', gceInstance('vm-9'));
    const dead = await closedPort();
    expect((await detectMetadata({ awsBaseUrl: aws.url, gceBaseUrl: dead })).identity.instanceId).toBe('i-9');
    expect((await detectMetadata({ awsBaseUrl: dead, gceBaseUrl: gce.url })).identity.instanceId).toBe('vm-9');
  });

  it('off-cloud, says within a few seconds that no metadata server answered, and why', async () => {
    const dead = await closedPort();
    // A server that accepts connections and never answers.
    const silent = createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const silentUrl = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
    const started = Date.now();
    const error = await detectMetadata({ awsBaseUrl: silentUrl, gceBaseUrl: dead, timeoutMs: 1000 }).catch((e: unknown) => e as Error);
    const took = Date.now() - started;
    silent.close();
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(
      new RegExp(
        `^no instance metadata server answered: AWS IMDS: PUT ${silentUrl}/latest/api/token: no answer within 1000 ms; GCE: GET ${dead}/computeMetadata/v1/instance/\\S+: ECONNREFUSED$`,
      ),
    );
    expect(took).toBeLessThan(5000);
  });

  it('a server that is not GCE metadata (no Metadata-Flavor in its answers) is refused', async () => {
    const aws = await server('aws', awsInstance('i-1'));
    const err = (await new GceMetadata(aws.url).identity().catch((e: unknown) => e)) as Error;
    expect(err.message).toMatch(/HTTP 401|not a GCE metadata server/);
  });
});
