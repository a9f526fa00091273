import { describe, expect, it } from 'vitest';
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { mockClient } from 'aws-sdk-client-mock';
import { ConfigError, isCloudError } from '../../core/errors.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { DEFAULT_NAMES, fleetConfigFromEnv, gcpStoreRoots, UNSTATED_NETWORK } from '../../cloud/env.ts';
import { fleetPorts } from '../../cloud/wiring.ts';

describe('the environment, read by one schema', () => {
  it('gives every setting its default when nothing is set', () => {
    const c = fleetConfigFromEnv({});
    expect(c).toEqual({
      region: 'us-east-1',
      tables: {
        jobs: DEFAULT_NAMES.jobs,
        nodes: DEFAULT_NAMES.nodes,
        control: DEFAULT_NAMES.control,
        idempotency: DEFAULT_NAMES.idempotency,
      },
      checkpointBucket: DEFAULT_NAMES.checkpointBucket,
      teamQueuePrefix: 'gpufleet-team-',
      lifecycleTimeoutSec: 300,
      policy: DEFAULT_POLICY,
      network: UNSTATED_NETWORK,
    });
  });

  it('reads the network the checkpoint bytes take, refusing what is not a path; the reconcile ports bill bytes on it', async () => {
    const c = fleetConfigFromEnv({
      AWS_REGION: 'us-west-2',
      GPU_FLEET_NETWORK: JSON.stringify({ s3Path: 'gateway-endpoint', natZones: ['us-west-2a', 'us-west-2b'] }),
    });
    expect(c.network).toEqual({ s3Path: 'gateway-endpoint', natZones: ['us-west-2a', 'us-west-2b'] });
    const bytes = (await fleetPorts(c)).reconcile.bytes!;
    expect(bytes.layout).toEqual(c.network);
    expect(bytes.store).toEqual({ cloud: 'aws', region: 'us-west-2' });
    expect(bytes.rates.get('aws:us-west-2')?.storagePerMonth.microUsd).toBeGreaterThan(0);
    // Unset, the fleet is billed as if its bytes went through a NAT gateway: never less than it may pay.
    expect(fleetConfigFromEnv({}).network).toEqual({ s3Path: 'nat', natZones: [] });
    const bad = (v: unknown) => () => fleetConfigFromEnv({ GPU_FLEET_NETWORK: typeof v === 'string' ? v : JSON.stringify(v) });
    expect(bad('{oops')).toThrow(/GPU_FLEET_NETWORK="\{oops" is not JSON/);
    expect(bad({ s3Path: 'vpn' })).toThrow(/"s3Path" must be one of gateway-endpoint, nat, interface-endpoint; got "vpn"/);
    expect(bad({ s3Path: 'nat', natZones: ['a'] })).toThrow(/"natZones" must be a list of AWS zones like "us-east-1a"; got \["a"\]/);
    expect(bad({ s3Path: 'nat', nat: 2 })).toThrow(/unknown key\(s\) nat; allowed: s3Path, natZones/);
  });

  it('reads which teams’ host-network work may share a machine into the policy, refusing what is not a pair of teams', () => {
    expect(fleetConfigFromEnv({ GPU_FLEET_HOST_NETWORK_SHARING: '[["nlp","speech"]]' }).policy.hostNetworkSharing).toEqual([
      ['nlp', 'speech'],
    ]);
    expect(fleetConfigFromEnv({}).policy.hostNetworkSharing).toBeUndefined();
    for (const bad of ['[["nlp"]]', '[["nlp","nlp"]]', '[["nlp","Speech!"]]', '{"nlp":"speech"}'])
      expect(() => fleetConfigFromEnv({ GPU_FLEET_HOST_NETWORK_SHARING: bad })).toThrow(
        /GPU_FLEET_HOST_NETWORK_SHARING must be a JSON list of pairs of two different team ids, e\.g\. \[\["nlp","speech"\]\]/,
      );
  });

  it('reads the services and their target groups, naming each bad entry; with them the ports run services', async () => {
    const arn = 'arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gf-nlp-chat/50dc6c495c0c9188';
    const c = fleetConfigFromEnv({ GPU_FLEET_SERVICE_TARGET_GROUPS: JSON.stringify({ 'nlp.chat': arn }) });
    expect(c.services).toEqual({ targetGroups: { 'nlp.chat': arn } });
    const ports = await fleetPorts(c);
    expect(ports.services).toBeDefined();
    expect(ports.reconcile.frontDoor?.fronts('nlp.chat')).toBe(true);
    expect(ports.reconcile.serviceLoad).toBeDefined();
    expect((await fleetPorts(fleetConfigFromEnv({}))).reconcile.services).toBeUndefined();
    const bad = () => fleetConfigFromEnv({ GPU_FLEET_SERVICE_TARGET_GROUPS: JSON.stringify({ chat: arn, 'nlp.embed': 'tg-1' }) });
    expect(bad).toThrow(ConfigError);
    expect(bad).toThrow(/"chat" is not a service id \(team\.name\)/);
    expect(bad).toThrow(/the target group of nlp\.embed must be a target group ARN, got "tg-1"/);
    expect(() => fleetConfigFromEnv({ GPU_FLEET_SERVICE_TARGET_GROUPS: '{oops' })).toThrow(/is not JSON; give each service's target group/);
  });

  it('reads the reservation selector, naming each bad term; the reconcile ports read reservations either way', async () => {
    const c = fleetConfigFromEnv({
      GPU_FLEET_RESERVATION_SELECTOR: JSON.stringify([{ id: 'cr-0123456789abcdef0' }, { tags: { team: 'nlp' } }]),
    });
    expect(c.reservationSelector).toEqual([{ id: 'cr-0123456789abcdef0' }, { tags: { team: 'nlp' } }]);
    expect((await fleetPorts(c)).reconcile.reservations).toHaveLength(1);
    expect(fleetConfigFromEnv({}).reservationSelector).toBeUndefined();
    const bad = () => fleetConfigFromEnv({ GPU_FLEET_RESERVATION_SELECTOR: JSON.stringify([{ id: 'i-123' }, { tags: {} }]) });
    expect(bad).toThrow(/GPU_FLEET_RESERVATION_SELECTOR\[0\] must be \{"id": "cr-…"\}/);
    expect(bad).toThrow(/GPU_FLEET_RESERVATION_SELECTOR\[1\] must be/);
    expect(() => fleetConfigFromEnv({ GPU_FLEET_RESERVATION_SELECTOR: '[]' })).toThrow(/non-empty JSON list of terms/);
  });

  it('reads the declared Savings Plans / RIs per family, naming each bad plan', async () => {
    const c = fleetConfigFromEnv({
      GPU_FLEET_DISCOUNTS: JSON.stringify([{ family: 'p4d', discountPct: 37.5, commitmentUsdPerHour: 12.25, name: 'sp-0123' }]),
    });
    expect(c.discounts).toEqual([{ family: 'p4d', discountBps: 3750, commitmentMicroUsdPerHour: 12_250_000, name: 'sp-0123' }]);
    expect((await fleetPorts(c)).reconcile.discounts).toEqual(c.discounts);
    const bad = () =>
      fleetConfigFromEnv({
        GPU_FLEET_DISCOUNTS: JSON.stringify([
          { family: 'P4D', discountPct: 40, commitmentUsdPerHour: 1 },
          { family: 'g5', discountPct: 100, commitmentUsdPerHour: 1 },
          { family: 'p5', discountPct: 20, commitmentUsdPerHour: 5 },
          { family: 'p5', discountPct: 30, commitmentUsdPerHour: 5 },
        ]),
      });
    expect(bad).toThrow(/GPU_FLEET_DISCOUNTS\[0\] must be \{"family": "p4d"/);
    expect(bad).toThrow(/GPU_FLEET_DISCOUNTS\[1\] must be/);
    expect(bad).toThrow(/GPU_FLEET_DISCOUNTS\[3\]: family p5 has a plan already/);
  });

  it('reads what the stack sets', () => {
    const c = fleetConfigFromEnv({
      AWS_REGION: 'us-west-2',
      GPU_FLEET_JOBS_TABLE: 'GpuFleet-JobsTable1A2B-XYZ',
      GPU_FLEET_CHECKPOINT_BUCKET: 's3://fleet-ckpt/checkpoints/',
      GPU_FLEET_DLQ_URL: 'https://sqs.us-west-2.amazonaws.com/123456789012/gpufleet-dead-letters',
      GPU_FLEET_RECONCILE_INTERVAL_SEC: '120',
      GPU_FLEET_GCP_PROJECTS: '[{"projectId":"ml-prod","zones":["us-central1-a","us-central1-b"]}]',
      GPU_FLEET_GCP_CREDENTIALS_SECRET: 'gpu-fleet/gcp-key',
    });
    expect(c.region).toBe('us-west-2');
    expect(c.tables.jobs).toBe('GpuFleet-JobsTable1A2B-XYZ');
    expect(c.checkpointBucket).toBe('s3://fleet-ckpt/checkpoints/');
    expect(c.policy.reconcileIntervalSec).toBe(120);
    expect(c.gcp).toEqual({
      projects: [{ projectId: 'ml-prod', zones: ['us-central1-a', 'us-central1-b'] }],
      credentialsSecret: 'gpu-fleet/gcp-key',
    });
  });

  it('reads a Cloud Storage checkpoint root per GCP region, only for regions the projects have zones in', () => {
    const gcp = '[{"projectId":"ml-prod","zones":["us-central1-a","us-west1-b"]}]';
    const c = fleetConfigFromEnv({
      GPU_FLEET_GCP_PROJECTS: gcp,
      GPU_FLEET_GCP_CHECKPOINT_ROOTS: '{"us-central1":"gs://fleet-ckpt-us-central1/checkpoints/","us-west1":"gs://fleet-ckpt-us-west1/"}',
    });
    expect(c.gcp?.checkpointRoots).toEqual({
      'us-central1': 'gs://fleet-ckpt-us-central1/checkpoints/',
      'us-west1': 'gs://fleet-ckpt-us-west1/',
    });
    expect(gcpStoreRoots(c)).toEqual([
      { root: 'gs://fleet-ckpt-us-central1/checkpoints/', site: { cloud: 'gcp', region: 'us-central1' } },
      { root: 'gs://fleet-ckpt-us-west1/', site: { cloud: 'gcp', region: 'us-west1' } },
    ]);
    const problems = (env: Record<string, string>) => {
      try {
        fleetConfigFromEnv(env);
      } catch (e) {
        return (e as ConfigError).problems;
      }
      return [];
    };
    expect(problems({ GPU_FLEET_GCP_PROJECTS: gcp, GPU_FLEET_GCP_CHECKPOINT_ROOTS: '{"europe-west4":"gs://b-eu/c/"}' })).toEqual([
      'GPU_FLEET_GCP_CHECKPOINT_ROOTS: "europe-west4" is no region of the zones in GPU_FLEET_GCP_PROJECTS (us-central1, us-west1)',
    ]);
    expect(problems({ GPU_FLEET_GCP_PROJECTS: gcp, GPU_FLEET_GCP_CHECKPOINT_ROOTS: '{"us-central1":"s3://b/c/"}' })).toEqual([
      'GPU_FLEET_GCP_CHECKPOINT_ROOTS.us-central1: "s3://b/c/" is not a Cloud Storage root gs://bucket/prefix/ (ending in "/")',
    ]);
    expect(problems({ GPU_FLEET_GCP_CHECKPOINT_ROOTS: '{"us-central1":"gs://b-c/c/"}' })).toEqual([
      'GPU_FLEET_GCP_CHECKPOINT_ROOTS is set, but GPU_FLEET_GCP_PROJECTS is not: a root is for the machines of a GCP region',
    ]);
    expect(problems({ GPU_FLEET_GCP_PROJECTS: gcp, GPU_FLEET_GCP_CHECKPOINT_ROOTS: '["gs://b/"]' })).toEqual([
      expect.stringMatching(/^GPU_FLEET_GCP_CHECKPOINT_ROOTS must be an object of GCP region → gs:\/\/ root/),
    ]);
  });

  it('names every bad variable, its value and what is allowed, in one error', () => {
    let error: unknown;
    try {
      fleetConfigFromEnv({
        GPU_FLEET_RECONCILE_INTERVAL_SEC: 'soon',
        GPU_FLEET_NOTICE_MARGIN_SEC: '500',
        GPU_FLEET_DLQ_URL: 'dead-letters',
        GPU_FLEET_JOBS_TABLE: 'a b',
        GPU_FLEET_GCP_PROJECTS: '[{"projectId":"p","zones":["central"]}]',
      });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems;
    expect(problems).toEqual(
      expect.arrayContaining([
        'GPU_FLEET_RECONCILE_INTERVAL_SEC="soon" must be a whole number of seconds from 10 to 3600',
        'GPU_FLEET_NOTICE_MARGIN_SEC="500" must be a whole number of seconds from 0 to 110',
        'GPU_FLEET_DLQ_URL="dead-letters" must be an SQS queue URL (https://…)',
        'GPU_FLEET_JOBS_TABLE="a b" must be a DynamoDB table name: 3 to 255 letters, digits, "_", "-" or "."',
        expect.stringMatching(/^GPU_FLEET_GCP_PROJECTS="\[.*\]" 0\.zones\.0: GCP zones look like "us-central1-a"; e\.g\. /),
      ]),
    );
    expect(problems).toHaveLength(5);
    expect(fleetConfigFromEnv.bind(null, { GPU_FLEET_GCP_PROJECTS: 'not json' })).toThrow(/GPU_FLEET_GCP_PROJECTS="not json" is not JSON/);
  });

  it('builds every port without calling any cloud, GCP only when configured', async () => {
    const aws = await fleetPorts(fleetConfigFromEnv({ AWS_REGION: 'us-west-2' }));
    expect(aws.providers.map((p) => p.cloud)).toEqual(['aws']);
    expect(aws.notices).toEqual([]);
    expect(aws.reconcile.notices).toEqual([]);
    const both = await fleetPorts(
      fleetConfigFromEnv({ AWS_REGION: 'us-west-2', GPU_FLEET_GCP_PROJECTS: '[{"projectId":"ml-prod","zones":["us-central1-a"]}]' }),
      { gcp: (await import('../../cloud/gcp/clients.ts')).gcpClients({ apiEndpoint: '127.0.0.1', port: 9, protocol: 'http' }) },
    );
    expect(both.providers.map((p) => p.cloud)).toEqual(['aws', 'gcp']);
    expect(both.reconcile.notices?.map((n) => n.cloud)).toEqual(['gcp']);
  });
});

describe('one cloud whose ports cannot be built degrades that cloud alone', () => {
  it('with the GCP credentials secret gone, the ports are built: AWS as ever, GCP failing every listing with why', async () => {
    const secrets = new SecretsManagerClient({ region: 'us-west-2', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
    const sm = mockClient(secrets);
    sm.on(GetSecretValueCommand).rejects(
      Object.assign(new Error("Secrets Manager can't find the specified secret."), {
        name: 'ResourceNotFoundException',
        $metadata: { httpStatusCode: 400 },
        $fault: 'client',
      }),
    );
    const c = fleetConfigFromEnv({
      AWS_REGION: 'us-west-2',
      GPU_FLEET_GCP_PROJECTS: '[{"projectId":"ml-prod","zones":["us-central1-a"]}]',
      GPU_FLEET_GCP_CREDENTIALS_SECRET: 'gpu-fleet/gcp-key',
    });
    const ports = await fleetPorts(c, { secrets });
    expect(ports.providers.map((p) => p.cloud)).toEqual(['aws', 'gcp']);
    const gcp = ports.providers[1]!;
    // Reported like a failed listing: a cloud error reconcile degrades that cloud on, never a crash of the whole run.
    const failure = await gcp.listGroups().catch((e: unknown) => e);
    expect(isCloudError(failure)).toBe(true);
    expect(String(failure)).toMatch(/its ports could not be built: read the GCP credentials secret .*gpu-fleet\/gcp-key/);
    await expect(gcp.listInstances()).rejects.toThrow(/could not be built/);
    expect(await gcp.describeInstance('i-0123456789abcdef0')).toBeUndefined();
    expect(ports.problems()).toEqual([
      expect.stringMatching(/^GCP \(ml-prod\): its ports could not be built: read the GCP credentials secret/),
    ]);
    sm.restore();
  });
});
