import { PassThroughClient } from 'google-auth-library';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { isCloudError } from '../../core/errors.ts';
import { plan } from '../../core/planner/planner.ts';
import { handleNotice, pollNotices } from '../../core/services/interruption.ts';
import { reconcile } from '../../core/reconcile/reconcile.ts';
import { readWorld } from '../../core/services/snapshot-reader.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { intake } from '../../core/services/intake.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { gcpClients } from '../../cloud/gcp/clients.ts';
import { gcpErrorCode, operationError, translateGcpError } from '../../cloud/gcp/errors.ts';
import { GcpMachineTypeCatalog } from '../../cloud/gcp/machine-types.ts';
import { MigNodeGroups } from '../../cloud/gcp/mig-node-groups.ts';
import { ShippedCatalogSource } from '../../cloud/catalog/shipped.ts';
import { GcpPreemptions } from '../../cloud/gcp/preemptions.ts';
import { GcpReservations } from '../../cloud/gcp/reservations.ts';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { nodeGroupProviderContract } from '../contract/node-group-provider.contract.ts';
import { FakeGce, gceFixture } from '../support/fake-gce.ts';
import { shippedCatalog } from '../../cloud/catalog/all-shipped.ts';

const PROJECT = 'ml-research-7';
const ZONES = ['us-central1-a', 'us-central1-b'];
const servers: FakeGce[] = [];
afterAll(async () => Promise.all(servers.map((s) => s.stop())));

/** A Compute server with a zonal spot A100 group, a regional on-demand one, and a group gpu-fleet does not manage. */
async function world() {
  const gce = await new FakeGce().start();
  servers.push(gce);
  gce.addTemplate(PROJECT, 'a2-spot', { machineType: 'a2-highgpu-1g', spot: true, labels: { 'gpu-fleet-managed': 'true' } });
  gce.addTemplate(PROJECT, 'a2-od', {
    machineType: 'a2-highgpu-1g',
    spot: false,
    labels: { 'gpu-fleet-managed': 'true', 'gpu-fleet-max-size': '3', 'gpu-fleet-mig': 'enabled' },
  });
  gce.addTemplate(PROJECT, 'web', { machineType: 'e2-standard-4', spot: false });
  gce.addMig({
    project: PROJECT,
    name: 'a100-spot',
    zone: 'us-central1-a',
    template: 'a2-spot',
    description: 'A100 spot pool. gpu-fleet-max-size=4',
  });
  gce.addMig({ project: PROJECT, name: 'a100-od', region: 'us-central1', zones: ZONES, template: 'a2-od' });
  gce.addMig({ project: PROJECT, name: 'web', zone: 'us-central1-a', template: 'web', targetSize: 2 });
  const clock = { nowMs: () => gce.nowMs };
  const clients = gcpClients({ apiEndpoint: '127.0.0.1', port: gce.port, protocol: 'http', authClient: new PassThroughClient() });
  const groups = new MigNodeGroups(clients, { projects: [{ projectId: PROJECT, zones: ZONES }], clock, cacheSec: 0 });
  const preemptions = new GcpPreemptions(clients.zoneOperations, groups, { projects: [{ projectId: PROJECT, zones: ZONES }], clock });
  return { gce, groups, preemptions, clients };
}

const SPOT = `${PROJECT}/us-central1-a/a100-spot`;
const OD = `${PROJECT}/us-central1/a100-od`;

nodeGroupProviderContract('GCP managed instance groups over HTTP', async () => {
  const { gce, groups } = await world();
  return { provider: groups, groupId: SPOT, settle: async () => gce.settle() };
});

describe('GCP managed instance groups', () => {
  let w: Awaited<ReturnType<typeof world>>;
  beforeEach(async () => {
    w = await world();
  });

  it('finds the groups whose template is labelled gpu-fleet-managed=true, zonal and regional, with offerings from the template', async () => {
    const groups = await w.groups.listGroups();
    expect(groups.map((g) => g.id).sort()).toEqual([OD, SPOT].sort());
    const spot = groups.find((g) => g.id === SPOT)!;
    expect(spot).toMatchObject({ cloud: 'gcp', region: 'us-central1', minSize: 0, maxSize: 4, desiredCapacity: 0 });
    expect(spot.offerings.map((o) => o.id)).toEqual(['gcp/us-central1-a/a2-highgpu-1g/spot']);
    const od = groups.find((g) => g.id === OD)!;
    expect(od).toMatchObject({ maxSize: 3, migEnabled: true });
    expect(od.offerings.map((o) => o.id)).toEqual([
      'gcp/us-central1-a/a2-highgpu-1g/on-demand',
      'gcp/us-central1-b/a2-highgpu-1g/on-demand',
    ]);
  });

  it('reads every page of the aggregated list and of the managed instances', async () => {
    w.gce.pageSize = 1;
    await w.groups.setDesiredCapacity(SPOT, 3);
    expect((await w.groups.listGroups()).map((g) => g.id).sort()).toEqual([OD, SPOT].sort());
    expect((await w.groups.listInstances()).filter((i) => i.groupId === SPOT)).toHaveLength(3);
    expect(w.gce.requests.filter((r) => r.includes('aggregated/instanceGroupManagers') && r.includes('pageToken=')).length).toBeGreaterThan(
      0,
    );
    expect(w.gce.requests.filter((r) => r.includes('listManagedInstances') && r.includes('pageToken=')).length).toBeGreaterThan(0);
  });

  it('says what is missing when a managed group has no size limit, and will not grow it', async () => {
    w.gce.addTemplate(PROJECT, 'g2', { machineType: 'g2-standard-8', spot: true, labels: { 'gpu-fleet-managed': 'true' } });
    w.gce.addMig({ project: PROJECT, name: 'l4', zone: 'us-central1-b', template: 'g2', targetSize: 1 });
    const g = (await w.groups.listGroups()).find((x) => x.id === `${PROJECT}/us-central1-b/l4`)!;
    expect(g).toMatchObject({ maxSize: 1, desiredCapacity: 1 });
    expect(w.groups.problems.join('\n')).toMatch(/l4: no gpu-fleet-max-size; add "gpu-fleet-max-size=N" to the MIG's description/);
  });

  it('reports instances with their state, zone, creation time, market and machine type', async () => {
    w.gce.nowMs += 1000;
    await w.groups.setDesiredCapacity(OD, 2);
    let list = (await w.groups.listInstances()).filter((i) => i.groupId === OD);
    expect(list.map((i) => i.state)).toEqual(['pending', 'pending']);
    w.gce.settle();
    list = (await w.groups.listInstances()).filter((i) => i.groupId === OD);
    expect(list.map((i) => [i.state, i.zone, i.capacityType, i.instanceType, i.launchedAtMs])).toEqual([
      ['running', 'us-central1-a', 'on-demand', 'a2-highgpu-1g', w.gce.nowMs],
      ['running', 'us-central1-b', 'on-demand', 'a2-highgpu-1g', w.gce.nowMs],
    ]);
    expect(await w.groups.describeInstance(list[1]!.id)).toMatchObject({ id: list[1]!.id, groupId: OD, state: 'running' });
    expect(await w.groups.describeInstance('not-a-machine')).toBeUndefined();
  });

  it('scales a regional group with the regional API and waits for each operation', async () => {
    await w.groups.setDesiredCapacity(OD, 2);
    expect(w.gce.requests).toContain(
      `POST /compute/v1/projects/${PROJECT}/regions/us-central1/instanceGroupManagers/a100-od/resize?size=2`,
    );
    expect(w.gce.requests.some((r) => /regions\/us-central1\/operations\/operation-[^/]+\/wait/.test(r))).toBe(true);
  });

  it('scales in by deleting named machines, never a protected one, newest first', async () => {
    await w.groups.setDesiredCapacity(SPOT, 1);
    w.gce.settle();
    w.gce.nowMs += 60_000;
    await w.groups.setDesiredCapacity(SPOT, 3);
    w.gce.settle();
    const [first, second, third] = (await w.groups.listInstances()).filter((i) => i.groupId === SPOT);
    await w.groups.setScaleInProtection(SPOT, [third!.id], true);
    const before = w.gce.requests.length;
    await w.groups.setDesiredCapacity(SPOT, 2);
    const calls = w.gce.requests.slice(before);
    expect(calls.some((r) => r.includes('/resize'))).toBe(false);
    expect(calls.filter((r) => r.includes('/deleteInstances'))).toHaveLength(1);
    w.gce.settle();
    // The newest unprotected machine (second) goes; the older one and the protected one stay.
    const afterOne = (await w.groups.listInstances()).map((i) => i.id);
    expect(afterOne).toEqual([first!.id, third!.id]);
    expect(afterOne).not.toContain(second!.id);
    await w.groups.setDesiredCapacity(SPOT, 1);
    w.gce.settle();
    expect((await w.groups.listInstances()).map((i) => i.id)).toEqual([third!.id]);
  });

  it('keeps a protected machine when asked to shrink below what runs work, and says so', async () => {
    await w.groups.setDesiredCapacity(SPOT, 1);
    w.gce.settle();
    const [only] = await w.groups.listInstances();
    await w.groups.setScaleInProtection(SPOT, [only!.id], true);
    await w.groups.setDesiredCapacity(SPOT, 0);
    w.gce.settle();
    expect((await w.groups.listInstances()).map((i) => i.id)).toEqual([only!.id]);
    expect(w.groups.problems.join('\n')).toMatch(/asked for 0 machines, but only 0 of the 1 to remove are unprotected/);
  });

  it('reports a stockout as a launch failure of the zone it happened in', async () => {
    w.gce.stockouts.add('us-central1-a');
    await w.groups.setDesiredCapacity(SPOT, 1);
    w.gce.settle();
    const failures = await w.groups.launchFailures(w.gce.nowMs - 60_000);
    expect(failures).toEqual([
      expect.objectContaining({
        groupId: SPOT,
        offeringId: 'gcp/us-central1-a/a2-highgpu-1g/spot',
        code: 'ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS',
        message: expect.stringMatching(/STOCKOUT/),
      }),
    ]);
    w.gce.stockouts.clear();
    w.gce.settle();
    expect(await w.groups.launchFailures(w.gce.nowMs - 60_000)).toEqual([]);
  });

  it('a group whose machines cannot be listed is left out of a reconcile alone, named by its id; its provider and other groups stay in', async () => {
    await w.groups.setDesiredCapacity(OD, 1);
    w.gce.settle();
    w.gce.fail(/a100-spot\/listManagedInstances/, 403, gceFixture('error-403-forbidden-permission.assembled.json'), 5);
    const e = createSimEnvironment({ startMs: w.gce.nowMs, seed: 1, groups: [], teams: ['nlp'], teamTags: defaultTeamTags(['nlp']) });
    const view = await readWorld({ ...e.ports, providers: [w.groups] });
    expect(view.groups.map((g) => g.id)).toEqual([OD]);
    expect(view.instances.map((i) => i.groupId)).toEqual([OD]);
    expect(view.degraded).toEqual([
      { cloud: 'gcp', scope: `group ${SPOT}`, error: expect.stringMatching(/list managed instances .*permission/), code: 'access-denied' },
    ]);
    // The group listing itself failing leaves the provider out, named by its projects.
    w.gce.fail(/aggregated\/instanceGroupManagers/, 403, gceFixture('error-403-forbidden-permission.assembled.json'));
    const down = await readWorld({ ...e.ports, providers: [w.groups] });
    expect(down.groups).toEqual([]);
    expect(down.degraded).toEqual([expect.objectContaining({ cloud: 'gcp', scope: `project ${PROJECT}`, code: 'access-denied' })]);
  });

  describe('errors, in the port vocabulary with context', () => {
    it('403 permission → access-denied, naming the call and the missing permission', async () => {
      w.gce.fail(/aggregated\/instanceGroupManagers/, 403, gceFixture('error-403-forbidden-permission.assembled.json'));
      const e = await w.groups.listGroups().catch((x: unknown) => x);
      expect(isCloudError(e, 'access-denied')).toBe(true);
      expect((e as Error).message).toMatch(
        /GCP list instance group managers on ml-research-7 failed.*Required 'compute.instanceGroupManagers.get' permission/,
      );
    });

    it('403 rateLimitExceeded and 429 RESOURCE_EXHAUSTED → throttled (retryable)', async () => {
      w.gce.fail(/aggregated/, 403, gceFixture('error-403-rateLimitExceeded.assembled.json'));
      const a = await w.groups.listGroups().catch((x: unknown) => x);
      expect(isCloudError(a, 'throttled') && a.retryable).toBe(true);
      w.gce.fail(/aggregated/, 429, gceFixture('error-429-RESOURCE_EXHAUSTED-rateLimitExceeded.assembled.json'));
      expect(isCloudError(await w.groups.listGroups().catch((x: unknown) => x), 'throttled')).toBe(true);
    });

    it('a missing template is not-found; an unknown group is not-found; a size past the limit is invalid-request', async () => {
      w.gce.templates.delete(`${PROJECT}/a2-spot`);
      expect(isCloudError(await w.groups.listGroups().catch((x: unknown) => x), 'not-found')).toBe(true);
      const fresh = await world();
      await expect(fresh.groups.setDesiredCapacity(`${PROJECT}/us-central1-a/nope`, 1)).rejects.toSatisfy((e) =>
        isCloudError(e, 'not-found'),
      );
      await expect(fresh.groups.setDesiredCapacity(SPOT, 5)).rejects.toThrow(/desired size 5 is outside its limits \[0, 4\]/);
    });

    it('an operation that ends in error raises it: quota → quota-exceeded, stockout → insufficient-capacity, precondition → conflict', () => {
      const quota = operationError(
        {
          name: 'op',
          error: { errors: [{ code: 'QUOTA_EXCEEDED', message: "Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in region us-central1." }] },
        },
        { operation: 'resize' },
      );
      expect(quota?.code).toBe('quota-exceeded');
      const stockout = gceFixture('zoneOperations-get-error-ZONE_RESOURCE_POOL_EXHAUSTED.partial.json') as Parameters<
        typeof operationError
      >[0];
      expect(operationError(stockout, { operation: 'insert' })?.code).toBe('insufficient-capacity');
      const precondition = gceFixture('zoneOperations-get-done-error-CONDITION_NOT_MET.json') as Parameters<typeof operationError>[0];
      expect(operationError(precondition, { operation: 'resize' })?.code).toBe('conflict');
      expect(operationError({ name: 'ok', status: 'DONE' } as never, { operation: 'resize' })).toBeUndefined();
      expect(gcpErrorCode({ httpStatusCode: 503, message: 'backend' })).toBe('unavailable');
      expect(translateGcpError({ code: 5, message: 'nope' }, { operation: 'get' }).code).toBe('not-found');
    });
  });

  describe('preemptions', () => {
    /** A job running on the spot group's machine, in the same stores the interruption service uses. */
    async function running() {
      await w.groups.setDesiredCapacity(SPOT, 1);
      w.gce.settle();
      const [inst] = await w.groups.listInstances();
      const e = createSimEnvironment({ startMs: w.gce.nowMs, seed: 1, teams: ['nlp'], teamTags: defaultTeamTags(['nlp']), groups: [] });
      await e.nodes.register({
        instanceId: inst!.id,
        groupId: SPOT,
        registeredAtMs: w.gce.nowMs,
        lastHeartbeatAtMs: w.gce.nowMs,
        healthy: true,
        gpus: [{ index: 0, model: 'A100-40GB', memoryMiB: 40_960 }],
      });
      await intake(e, {
        team: 'nlp',
        token: 'a',
        body: JSON.stringify({
          image: 'pytorch/pytorch:2.3.0',
          command: ['python', 'train.py'],
          gpu: { kind: 'whole', count: 1 },
          checkpoint: { intervalSec: 600 },
        }),
      });
      await applyJobEvent(
        e.jobs,
        'nlp.a',
        { type: 'place', attempt: 1, placement: { nodes: [{ nodeId: inst!.id, gpuIndices: [0] }], capacityType: 'spot' } },
        w.gce.nowMs,
      );
      await applyJobEvent(e.jobs, 'nlp.a', { type: 'start', attempt: 1 }, w.gce.nowMs);
      return { e, instanceId: inst!.id, ports: { ...e.ports, providers: [w.groups] } };
    }

    it('finds compute.instances.preempted operations since the last look, and requeues the work once however often it is seen', async () => {
      const { e, instanceId, ports } = await running();
      expect(await w.preemptions.poll()).toEqual([]);
      w.gce.nowMs += 30_000;
      w.gce.preempt(instanceId);
      w.gce.nowMs += 30_000;
      const first = await pollNotices(ports, [w.preemptions], DEFAULT_POLICY);
      expect(first).toMatchObject({ seen: 1, handled: 1, requeued: ['nlp.a'], errors: [] });
      expect(
        w.gce.requests.some(
          (r) => r.includes('/operations?') && decodeURIComponent(r).includes('operationType = "compute.instances.preempted"'),
        ),
      ).toBe(true);
      // The next look overlaps the last: the same preemption comes again and changes nothing.
      w.gce.nowMs += 60_000;
      const again = await pollNotices(ports, [w.preemptions], DEFAULT_POLICY);
      expect(again.requeued).toEqual([]);
      const job = (await e.jobs.get('nlp.a'))!;
      expect(job).toMatchObject({ state: 'pending', attempt: 2, requeueReason: { code: 'interrupted' } });
    });

    it('reads preemptions of the past 15 minutes on a first look, not older', async () => {
      const { instanceId } = await running();
      w.gce.preempt(instanceId);
      w.gce.nowMs += 16 * 60_000;
      // The operation is too old, but the machine itself is still there, stopped: found by its state.
      const notices = await w.preemptions.poll();
      expect(notices).toEqual([
        expect.objectContaining({ kind: 'preempted', instanceId, eventId: expect.stringContaining('found-terminated') }),
      ]);
    });

    it('turns a spot machine found TERMINATED without any operation into a preemption, from the listing reconcile already made', async () => {
      const { e, instanceId, ports } = await running();
      w.gce.preempt(instanceId, { recordOperation: false });
      // The poll reuses the node groups' last listing (made before the preemption): no second listing, nothing seen yet.
      const before = w.gce.requests.length;
      expect((await pollNotices(ports, [w.preemptions], DEFAULT_POLICY)).requeued).toEqual([]);
      expect(w.gce.requests.slice(before).filter((r) => r.includes('listManagedInstances'))).toEqual([]);
      // The next reconcile lists the instances; the poll after it finds the machine stopped.
      await w.groups.listInstances();
      const out = await pollNotices(ports, [w.preemptions], DEFAULT_POLICY);
      expect(out.requeued).toEqual(['nlp.a']);
      expect((await e.nodes.get(instanceId))!.draining).toMatchObject({ reason: 'machine preempted' });
      // Handling the same notice again requeues nothing more.
      const [notice] = await w.preemptions.poll();
      const again = await handleNotice(ports, notice!, DEFAULT_POLICY);
      expect(again.status === 'handled' ? again.requeued : []).toEqual([]);
      expect((await e.jobs.get('nlp.a'))!.attempt).toBe(2);
    });

    it('logs and skips a zone it cannot read, and tries again next time', async () => {
      const { ports } = await running();
      w.gce.fail(/zones\/us-central1-a\/operations$/, 403, gceFixture('error-403-forbidden-permission.assembled.json'));
      const out = await pollNotices(ports, [w.preemptions], DEFAULT_POLICY);
      expect(out.errors).toEqual([expect.stringMatching(/^gcp: GCP list preemption operations on ml-research-7\/us-central1-a failed/)]);
      expect((await pollNotices(ports, [w.preemptions], DEFAULT_POLICY)).errors).toEqual([]);
    });
  });
});

describe('GCP machine types', () => {
  it('takes GPU facts from the shipped catalogue, and from the Compute API for a type it does not ship', async () => {
    const w = await world();
    // A machine type the shipped catalogue lacks, answered by the API in the second zone only.
    w.gce.machineTypes.set('g2-custom-2g', {
      kind: 'compute#machineType',
      name: 'g2-custom-2g',
      guestCpus: 16,
      memoryMb: 65_536,
      accelerators: [{ guestAcceleratorCount: 2, guestAcceleratorType: 'nvidia-l4' }],
    });
    w.gce.machineTypes.set('z9-mystery-1g', {
      kind: 'compute#machineType',
      name: 'z9-mystery-1g',
      guestCpus: 4,
      memoryMb: 8192,
      accelerators: [{ guestAcceleratorCount: 1, guestAcceleratorType: 'nvidia-quantum-9000' }],
    });
    w.gce.fail(/zones\/us-central1-a\/machineTypes\/g2-custom-2g$/, 404, gceFixture('error-404-notFound-instanceTemplate.json'));
    const catalog = new GcpMachineTypeCatalog(
      w.clients.machineTypes,
      [{ projectId: PROJECT, zones: ZONES }],
      new ShippedCatalogSource(shippedCatalog()),
    );
    const before = w.gce.requests.length;
    const types = await catalog.instanceTypes(['a2-highgpu-1g', 'g2-custom-2g', 'z9-mystery-1g', 'no-such-type']);
    expect(types.get('a2-highgpu-1g')).toMatchObject({ cloud: 'gcp', gpuModel: 'A100-40GB', gpuCount: 1 });
    expect(types.get('g2-custom-2g')).toEqual({
      name: 'g2-custom-2g',
      cloud: 'gcp',
      gpuModel: 'L4',
      gpuCount: 2,
      gpuMemoryMiB: 24_576,
      vcpus: 16,
      memoryMiB: 65_536,
    });
    expect(types.has('z9-mystery-1g')).toBe(false);
    expect(types.has('no-such-type')).toBe(false);
    expect(catalog.problems).toEqual([
      expect.stringMatching(/z9-mystery-1g: accelerator nvidia-quantum-9000 is not one gpu-fleet schedules/),
    ]);
    // The shipped type needed no call; each other type is read once.
    const calls = w.gce.requests.slice(before);
    expect(calls.filter((r) => r.includes('/machineTypes/a2-highgpu-1g'))).toEqual([]);
    await catalog.instanceTypes(['g2-custom-2g']);
    expect(w.gce.requests.slice(before).filter((r) => r.includes('/machineTypes/g2-custom-2g'))).toHaveLength(2);
  });
});

describe('one fleet, two clouds', () => {
  it('puts an A100 job on a GCP spot machine when that is the cheapest offering, beside AWS groups, and a job limited to AWS stays there', async () => {
    const w = await world();
    const e = createSimEnvironment({
      startMs: w.gce.nowMs,
      seed: 1,
      teams: ['nlp'],
      teamTags: defaultTeamTags(['nlp']),
      groups: [{ id: 'p4d-od', instanceTypes: ['p4d.24xlarge'], zones: ['us-east-1a'], capacityType: 'on-demand', minSize: 0, maxSize: 2 }],
    });
    const ports = { ...e.ports, providers: [...e.ports.providers, w.groups] };
    const a100 = (token: string, extra: Record<string, unknown> = {}) =>
      intake(e, {
        team: 'nlp',
        token,
        body: JSON.stringify({
          image: 'pytorch/pytorch:2.3.0',
          command: ['python', 'train.py'],
          gpu: { kind: 'whole', count: 1, models: ['A100-40GB'] },
          checkpoint: { intervalSec: 600 },
          expectedRuntimeSec: 7200,
          ...extra,
        }),
      });
    await a100('cheap');
    await a100('aws-only', { placement: { clouds: ['aws'] } });
    const out = await reconcile(ports, { planner: plan, policy: DEFAULT_POLICY });
    expect(out.status).toBe('done');
    if (out.status !== 'done') return;
    const ups = out.decision.plan.actions.filter((a) => a.kind === 'scale-up');
    expect(ups.map((a) => (a as { groupId: string }).groupId).sort()).toEqual(['p4d-od', SPOT].sort());
    // The GCP group was really resized, through the Compute API.
    expect(w.gce.requests).toContain(
      `POST /compute/v1/projects/${PROJECT}/zones/us-central1-a/instanceGroupManagers/a100-spot/resize?size=1`,
    );
    const waiting = new Map(out.decision.plan.waiting.map((x) => [x.jobId, x.reason.message]));
    expect(waiting.get('nlp.cheap')).toBeDefined();
  });
});

describe('GCP reservations', () => {
  it('reads each zone’s reservations (free = count − inUseCount, READY only takes machines); a group whose template consumes one launches reserved', async () => {
    const gce = await new FakeGce().start();
    servers.push(gce);
    gce.pageSize = 1;
    gce.addReservation(PROJECT, 'us-central1-a', 'a100-res', { machineType: 'a2-highgpu-1g', count: 4, inUseCount: 1 });
    gce.addReservation(PROJECT, 'us-central1-a', 'a100-new', {
      machineType: `https://www.googleapis.com/compute/v1/projects/${PROJECT}/zones/us-central1-a/machineTypes/a2-highgpu-1g`,
      count: 2,
      inUseCount: 0,
      status: 'CREATING',
    });
    gce.addTemplate(PROJECT, 'a2-res', {
      machineType: 'a2-highgpu-1g',
      spot: false,
      reservation: 'a100-res',
      labels: { 'gpu-fleet-managed': 'true', 'gpu-fleet-max-size': '4' },
    });
    gce.addMig({ project: PROJECT, name: 'a100-res', zone: 'us-central1-a', template: 'a2-res', targetSize: 1 });
    const clock = { nowMs: () => gce.nowMs };
    const clients = gcpClients({ apiEndpoint: '127.0.0.1', port: gce.port, protocol: 'http', authClient: new PassThroughClient() });
    const source = new GcpReservations(clients.reservations!, {
      projects: [{ projectId: PROJECT, zones: ZONES }],
      onDemandPrice: (type) => (type === 'a2-highgpu-1g' ? 3_673_000 : undefined),
    });
    const found = await source.listReservations();
    expect(found).toEqual([
      expect.objectContaining({
        id: 'a100-res',
        cloud: 'gcp',
        zone: 'us-central1-a',
        instanceType: 'a2-highgpu-1g',
        totalCount: 4,
        availableCount: 3,
        state: 'active',
        priceMicroUsdPerHour: 3_673_000,
      }),
      expect.objectContaining({ id: 'a100-new', totalCount: 2, state: 'pending' }),
    ]);
    // Paged one at a time, each zone asked.
    expect(gce.requests.filter((r) => r.includes('/reservations')).length).toBeGreaterThanOrEqual(3);
    const groups = new MigNodeGroups(clients, { projects: [{ projectId: PROJECT, zones: ZONES }], clock, cacheSec: 0 });
    const [g] = await groups.listGroups();
    expect(g!.offerings.map((o) => o.id)).toEqual(['gcp/us-central1-a/a2-highgpu-1g/reserved/a100-res']);
    const [machine] = await groups.listInstances();
    expect(machine).toMatchObject({ capacityType: 'reserved', reservationId: 'a100-res' });
  });
});
