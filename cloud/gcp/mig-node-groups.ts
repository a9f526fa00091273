import type {
  InstanceGroupManagersClient,
  InstancesClient,
  InstanceTemplatesClient,
  MachineTypesClient,
  protos,
  RegionInstanceGroupManagersClient,
  RegionInstanceTemplatesClient,
  RegionOperationsClient,
  ZoneOperationsClient,
} from '@google-cloud/compute';
import { makeOffering, type CapacityType } from '../../core/catalog.ts';
import { CloudError } from '../../core/errors.ts';
import type { Instance, InstanceState, NodeGroup } from '../../core/fleet.ts';
import type { Clock, GroupListing, LaunchFailure, NodeGroupProvider } from '../../core/ports.ts';
import type { ReservationsApi } from './reservations.ts';
import { operationError, translateGcpError } from './errors.ts';

type Igm = protos.google.cloud.compute.v1.IInstanceGroupManager;
type ManagedInstance = protos.google.cloud.compute.v1.IManagedInstance;
type Template = protos.google.cloud.compute.v1.IInstanceTemplate;
type Operation = protos.google.cloud.compute.v1.IOperation;
type GceInstance = protos.google.cloud.compute.v1.IInstance;

/** Labels (on the instance template) and `key=value` words (in the MIG's description) gpu-fleet reads. */
export const GCP_LABELS = {
  /** On the instance template: `gpu-fleet-managed=true` marks the groups gpu-fleet manages. */
  managed: 'gpu-fleet-managed',
  /** Size limits: in the MIG's description (per group) or on the template. MIGs have no limits of their own. */
  minSize: 'gpu-fleet-min-size',
  maxSize: 'gpu-fleet-max-size',
  /** `enabled`: the machines boot with MIG mode on. */
  mig: 'gpu-fleet-mig',
  /** On an instance: protected from gpu-fleet's own scale-in because it runs work. */
  protected: 'gpu-fleet-protected',
} as const;

/** The reservation affinity key that names a specific reservation in an instance template. */
export const RESERVATION_AFFINITY_KEY = 'compute.googleapis.com/reservation-name';

export interface GcpScope {
  readonly projectId: string;
  /** Zones gpu-fleet may use; a regional MIG is used in those of its zones listed here. */
  readonly zones: readonly string[];
}

export interface GcpClients {
  readonly instanceGroupManagers: InstanceGroupManagersClient;
  readonly regionInstanceGroupManagers: RegionInstanceGroupManagersClient;
  readonly instanceTemplates: InstanceTemplatesClient;
  readonly regionInstanceTemplates: RegionInstanceTemplatesClient;
  readonly instances: InstancesClient;
  readonly zoneOperations: ZoneOperationsClient;
  readonly regionOperations: RegionOperationsClient;
  readonly machineTypes: MachineTypesClient;
  /** Reservations (optional: without it, no GCP reservation is read). */
  readonly reservations?: ReservationsApi;
}

export interface MigOptions {
  readonly projects: readonly GcpScope[];
  readonly clock: Clock;
  /** How long the list of managed groups is trusted, seconds (default 20). */
  readonly cacheSec?: number;
  /** Longest wait for one operation, seconds (default 120; Compute's wait returns after at most 2 min). */
  readonly operationTimeoutSec?: number;
}

/** A managed instance group gpu-fleet manages, with what it read of it. */
interface Mig {
  readonly id: string;
  readonly project: string;
  /** The zone of a zonal MIG, or the region of a regional one. */
  readonly location: string;
  readonly regional: boolean;
  readonly name: string;
  readonly igm: Igm;
  readonly group: NodeGroup;
  readonly machineType: string;
}

const last = (url: string | null | undefined) => (url ?? '').split('/').pop() ?? '';
/** The zone in a Compute resource URL (…/zones/us-central1-a/instances/x), or undefined. */
const zoneOfUrl = (url: string | null | undefined) => /\/zones\/([^/]+)\//.exec(url ?? '')?.[1];
const regionOf = (zone: string) => zone.replace(/-[a-z]$/, '');
const CREATING = new Set([
  'CREATING',
  'CREATING_WITHOUT_RETRIES',
  'RECREATING',
  'VERIFYING',
  'RESUMING',
  'STARTING',
  'REFRESHING',
  'RESTARTING',
]);
const LEAVING = new Set(['DELETING', 'ABANDONING', 'STOPPING', 'SUSPENDING']);

/**
 * Node groups on GCP managed instance groups, zonal and regional, through `@google-cloud/compute`.
 *
 * - A group is a MIG whose instance template carries the label `gpu-fleet-managed=true`, in one of
 *   the configured projects and zones (one aggregated list per project, paginated). Its id is
 *   `project/location/name`. Offerings: the template's machine type × the MIG's zones × SPOT or
 *   STANDARD provisioning. Limits come from `gpu-fleet-min-size=N gpu-fleet-max-size=N` in the MIG's
 *   description (or the same labels on the template), since a MIG has none of its own.
 * - Instances are the MIG's managed instances; an instance's id is its name (what the agent reads
 *   from the metadata server). Creation times and protection labels come from one instance list per zone.
 * - Scale-out is a resize; scale-in removes named instances with deleteInstances (which lowers the
 *   target size), never a bare resize down, so the MIG cannot pick a machine that runs work.
 *   gpu-fleet waits for each operation and turns its errors into port errors.
 * - Launch failures are the managed instances' last attempt errors (a stockout shows there).
 * - GCP has no lifecycle hooks: completing one is a no-op.
 */
export class MigNodeGroups implements NodeGroupProvider {
  readonly cloud = 'gcp' as const;
  /** The projects it manages groups in, to name it when it fails. */
  get scope(): string {
    return `project ${this.options.projects.map((p) => p.projectId).join(', ')}`;
  }
  private cache: { atMs: number; migs: Mig[] } | undefined;
  private lastInstances: { atMs: number; list: Instance[] } | undefined;
  private readonly templates = new Map<string, Template>();
  private groupProblems: string[] = [];
  private readonly actionProblems: string[] = [];

  /** Problems found while reading groups (redone on every read) and the latest ones met while scaling, for logs and status. */
  get problems(): readonly string[] {
    return [...this.groupProblems, ...this.actionProblems];
  }

  constructor(
    private readonly c: GcpClients,
    private readonly options: MigOptions,
  ) {}

  // ---- groups -----------------------------------------------------------------------------

  private async migs(fresh = false): Promise<Mig[]> {
    const now = this.options.clock.nowMs();
    if (!fresh && this.cache && now - this.cache.atMs < (this.options.cacheSec ?? 20) * 1000) return this.cache.migs;
    const problems: string[] = [];
    const out: Mig[] = [];
    for (const scope of this.options.projects) {
      const zones = new Set(scope.zones);
      const regions = new Set(scope.zones.map(regionOf));
      const found: Igm[] = [];
      await this.call('list instance group managers', scope.projectId, async () => {
        for await (const [key, list] of this.c.instanceGroupManagers.aggregatedListAsync({ project: scope.projectId, maxResults: 500 })) {
          const [kind, where] = key.split('/');
          if ((kind === 'zones' && zones.has(where ?? '')) || (kind === 'regions' && regions.has(where ?? '')))
            found.push(...(list.instanceGroupManagers ?? []));
        }
      });
      for (const igm of found) {
        const template = await this.template(scope.projectId, igm.instanceTemplate ?? igm.versions?.[0]?.instanceTemplate ?? '');
        const labels = template?.properties?.labels ?? {};
        if (labels[GCP_LABELS.managed] !== 'true') continue;
        const regional = !igm.zone && !!igm.region;
        const location = last(regional ? igm.region : igm.zone);
        const name = igm.name ?? '';
        const id = `${scope.projectId}/${location}/${name}`;
        const words = descriptionWords(igm.description);
        const limit = (key: string) => {
          const raw = words.get(key) ?? labels[key];
          if (raw === undefined) return undefined;
          const n = Number(raw);
          if (!Number.isInteger(n) || n < 0) {
            problems.push(`group ${id}: ${key}=${raw} is not a whole number ≥ 0`);
            return undefined;
          }
          return n;
        };
        const target = igm.targetSize ?? 0;
        const minSize = limit(GCP_LABELS.minSize) ?? 0;
        let maxSize = limit(GCP_LABELS.maxSize);
        if (maxSize === undefined) {
          problems.push(
            `group ${id}: no ${GCP_LABELS.maxSize}; add "${GCP_LABELS.maxSize}=N" to the MIG's description (or as a label on its template). gpu-fleet will not grow it past its size now (${target})`,
          );
          maxSize = target;
        }
        const machineType = last(template?.properties?.machineType);
        const scheduling = template?.properties?.scheduling;
        // A template that consumes a specific reservation launches into it: its machines are reserved capacity.
        const affinity = template?.properties?.reservationAffinity;
        const reservationId =
          affinity?.consumeReservationType === 'SPECIFIC_RESERVATION' && affinity.key === RESERVATION_AFFINITY_KEY
            ? affinity.values?.[0]?.split('/').pop()
            : undefined;
        const capacityType: CapacityType = reservationId
          ? 'reserved'
          : scheduling?.provisioningModel === 'SPOT' || scheduling?.preemptible === true
            ? 'spot'
            : 'on-demand';
        const groupZones = regional
          ? (igm.distributionPolicy?.zones ?? []).map((z) => last(z.zone)).filter((z) => zones.has(z))
          : [location];
        const migZones = regional && groupZones.length === 0 ? [...zones].filter((z) => regionOf(z) === location) : groupZones;
        const region = regional ? location : regionOf(location);
        out.push({
          id,
          project: scope.projectId,
          location,
          regional,
          name,
          igm,
          machineType,
          group: {
            id,
            cloud: 'gcp',
            region,
            offerings: machineType
              ? migZones.sort().map((zone) =>
                  makeOffering({
                    cloud: 'gcp',
                    region,
                    zone,
                    instanceType: machineType,
                    capacityType,
                    ...(reservationId ? { reservationId } : {}),
                  }),
                )
              : [],
            minSize,
            maxSize: Math.max(minSize, maxSize),
            desiredCapacity: target,
            ...(labels[GCP_LABELS.mig] === 'enabled' ? { migEnabled: true } : {}),
          },
        });
      }
    }
    this.groupProblems = problems;
    this.cache = { atMs: now, migs: out };
    return out;
  }

  private async template(project: string, url: string): Promise<Template | undefined> {
    if (!url) return undefined;
    const cached = this.templates.get(url);
    if (cached) return cached;
    const name = last(url);
    const region = /\/regions\/([^/]+)\//.exec(url)?.[1];
    const [t] = await this.call('read instance template', url, () =>
      region
        ? this.c.regionInstanceTemplates.get({ project, region, instanceTemplate: name })
        : this.c.instanceTemplates.get({ project, instanceTemplate: name }),
    );
    // Templates are immutable: one read per name for the life of the process.
    this.templates.set(url, t);
    return t;
  }

  private async mig(groupId: string, operation: string): Promise<Mig> {
    const m = (await this.migs()).find((x) => x.id === groupId) ?? (await this.migs(true)).find((x) => x.id === groupId);
    if (!m)
      throw new CloudError(
        'not-found',
        `node group ${groupId} does not exist or is not managed by gpu-fleet (template label ${GCP_LABELS.managed}=true)`,
        { operation, resource: groupId, cloud: 'gcp' },
      );
    return m;
  }

  async listGroups(): Promise<NodeGroup[]> {
    return (await this.migs(true)).map((m) => m.group);
  }

  // ---- instances --------------------------------------------------------------------------

  private async managedInstances(m: Mig): Promise<ManagedInstance[]> {
    const out: ManagedInstance[] = [];
    await this.call('list managed instances', m.id, async () => {
      const req = { project: m.project, instanceGroupManager: m.name, maxResults: 500 };
      const pages = m.regional
        ? this.c.regionInstanceGroupManagers.listManagedInstancesAsync({ ...req, region: m.location })
        : this.c.instanceGroupManagers.listManagedInstancesAsync({ ...req, zone: m.location });
      for await (const mi of pages) out.push(mi);
    });
    return out;
  }

  /** Creation time and labels of the instances in a zone (one list call per project and zone). */
  private async zoneInstances(project: string, zone: string): Promise<Map<string, GceInstance>> {
    const out = new Map<string, GceInstance>();
    await this.call('list instances', `${project}/${zone}`, async () => {
      for await (const i of this.c.instances.listAsync({ project, zone, maxResults: 500 })) out.set(i.name ?? '', i);
    });
    return out;
  }

  private toInstance(m: Mig, mi: ManagedInstance, details: GceInstance | undefined): Instance {
    const zone = zoneOfUrl(mi.instance) ?? (m.regional ? '' : m.location);
    const created = details?.creationTimestamp ? Date.parse(details.creationTimestamp) : NaN;
    return {
      id: last(mi.instance),
      groupId: m.id,
      cloud: 'gcp',
      region: m.group.region,
      zone,
      instanceType: m.machineType,
      capacityType: m.group.offerings[0]?.capacityType ?? 'on-demand',
      ...(m.group.offerings[0]?.reservationId !== undefined ? { reservationId: m.group.offerings[0].reservationId } : {}),
      state: stateOf(mi),
      launchedAtMs: Number.isFinite(created) ? created : this.options.clock.nowMs(),
      scaleInProtected: details?.labels?.[GCP_LABELS.protected] === 'true',
    };
  }

  /**
   * The instances as last listed, when that is at most `maxAgeMs` old; else listed now. Reconcile
   * lists them every minute: the preemption poll reuses that rather than listing twice.
   */
  async recentInstances(maxAgeMs: number): Promise<Instance[]> {
    const c = this.lastInstances;
    if (c && this.options.clock.nowMs() - c.atMs <= maxAgeMs) return c.list;
    return this.listInstances();
  }

  async listInstances(): Promise<Instance[]> {
    const atMs = this.options.clock.nowMs();
    const list = await this.listInstancesNow();
    this.lastInstances = { atMs, list };
    return list;
  }

  private async listInstancesNow(): Promise<Instance[]> {
    const out: Instance[] = [];
    for (const r of await this.listPerMig(await this.migs(true))) {
      if ('error' in r) throw r.error;
      out.push(...r.instances);
    }
    return out;
  }

  /**
   * The machines group by group: a MIG whose managed instances (or whose zone's instances)
   * cannot be listed comes back with its error, so only that group is left out of a reconcile.
   * Uses the groups as `listGroups` just read them.
   */
  async listInstancesByGroup(): Promise<GroupListing[]> {
    const atMs = this.options.clock.nowMs();
    const per = await this.listPerMig(await this.migs());
    this.lastInstances = { atMs, list: per.flatMap((r) => ('instances' in r ? r.instances : [])) };
    return per.map((r) => ('error' in r ? { groupId: r.m.id, error: r.error } : { groupId: r.m.id, instances: r.instances }));
  }

  private async listPerMig(migs: readonly Mig[]): Promise<({ m: Mig; instances: Instance[] } | { m: Mig; error: unknown })[]> {
    const perMig = await Promise.all(
      migs.map(async (m) => {
        try {
          return { m, list: await this.managedInstances(m), error: undefined };
        } catch (error) {
          return { m, list: undefined, error };
        }
      }),
    );
    // Creation times and labels: one list per project and zone, shared by the groups in it.
    const zones = new Map<string, Promise<Map<string, GceInstance>>>();
    const out: ({ m: Mig; instances: Instance[] } | { m: Mig; error: unknown })[] = [];
    for (const r of perMig) {
      const { m, list } = r;
      if (!list) {
        out.push({ m, error: r.error });
        continue;
      }
      try {
        const details = new Map<string, Map<string, GceInstance>>();
        for (const mi of list) {
          const zone = zoneOfUrl(mi.instance);
          const key = `${m.project}/${zone}`;
          if (!zone || details.has(key)) continue;
          if (!zones.has(key)) zones.set(key, this.zoneInstances(m.project, zone));
          details.set(key, await zones.get(key)!);
        }
        out.push({
          m,
          instances: list
            .filter((mi) => mi.instance)
            .map((mi) => this.toInstance(m, mi, details.get(`${m.project}/${zoneOfUrl(mi.instance)}`)?.get(last(mi.instance)))),
        });
      } catch (error) {
        out.push({ m, error });
      }
    }
    return out;
  }

  async describeInstance(instanceId: string): Promise<Instance | undefined> {
    for (const m of await this.migs()) {
      const mi = (await this.managedInstances(m)).find((x) => last(x.instance) === instanceId);
      if (!mi) continue;
      const zone = zoneOfUrl(mi.instance);
      const details = zone ? (await this.zoneInstances(m.project, zone)).get(instanceId) : undefined;
      return this.toInstance(m, mi, details);
    }
    return undefined;
  }

  // ---- scaling ----------------------------------------------------------------------------

  async setDesiredCapacity(groupId: string, desired: number): Promise<void> {
    const m = await this.mig(groupId, 'set desired capacity');
    const { minSize, maxSize } = m.group;
    if (!Number.isInteger(desired) || desired < minSize || desired > maxSize) {
      throw new CloudError(
        'invalid-request',
        `node group ${groupId}: desired size ${desired} is outside its limits [${minSize}, ${maxSize}] (${GCP_LABELS.minSize}/${GCP_LABELS.maxSize})`,
        { operation: 'set desired capacity', resource: groupId, cloud: 'gcp' },
      );
    }
    const target = (await this.migs(true)).find((x) => x.id === groupId)?.igm.targetSize ?? m.igm.targetSize ?? 0;
    if (desired === target) return;
    if (desired > target) {
      const req = { project: m.project, instanceGroupManager: m.name, size: desired };
      const [op] = await this.call('resize', groupId, () =>
        m.regional
          ? this.c.regionInstanceGroupManagers.resize({ ...req, region: m.location })
          : this.c.instanceGroupManagers.resize({ ...req, zone: m.location }),
      );
      await this.waitFor(m, op.latestResponse as Operation, 'resize');
    } else {
      // Down: remove named machines (not yet running first, then the newest), never a protected one.
      const list = (await this.managedInstances(m)).filter((mi) => mi.instance && !LEAVING.has(mi.currentAction ?? ''));
      const zoneOf = (mi: ManagedInstance) => zoneOfUrl(mi.instance) ?? '';
      const details = new Map<string, GceInstance>();
      for (const z of new Set(list.map(zoneOf))) for (const [k, v] of await this.zoneInstances(m.project, z)) details.set(k, v);
      const candidates = list
        .filter((mi) => details.get(last(mi.instance))?.labels?.[GCP_LABELS.protected] !== 'true')
        .sort(
          (a, b) =>
            Number(stateOf(a) === 'running') - Number(stateOf(b) === 'running') ||
            Date.parse(details.get(last(b.instance))?.creationTimestamp ?? '') -
              Date.parse(details.get(last(a.instance))?.creationTimestamp ?? ''),
        );
      const victims = candidates.slice(0, target - desired);
      if (victims.length < target - desired)
        this.noteActionProblem(
          `group ${groupId}: asked for ${desired} machines, but only ${victims.length} of the ${target - desired} to remove are unprotected; the rest run work`,
        );
      if (victims.length > 0)
        await this.deleteInstances(
          m,
          victims.map((v) => v.instance!),
        );
    }
    this.cache = undefined;
  }

  private noteActionProblem(text: string): void {
    this.actionProblems.push(text);
    if (this.actionProblems.length > 20) this.actionProblems.shift();
  }

  private async deleteInstances(m: Mig, urls: readonly string[]): Promise<void> {
    const body = { instances: urls.map((u) => u.replace(/^.*\/(projects\/)/, '$1')), skipInstancesOnValidationError: true };
    const req = { project: m.project, instanceGroupManager: m.name };
    const [op] = await this.call('delete instances', `${m.id} (${urls.map(last).join(', ')})`, () =>
      m.regional
        ? this.c.regionInstanceGroupManagers.deleteInstances({
            ...req,
            region: m.location,
            regionInstanceGroupManagersDeleteInstancesRequestResource: body,
          })
        : this.c.instanceGroupManagers.deleteInstances({
            ...req,
            zone: m.location,
            instanceGroupManagersDeleteInstancesRequestResource: body,
          }),
    );
    await this.waitFor(m, op.latestResponse as Operation, 'delete instances');
  }

  async terminateInstance(groupId: string, instanceId: string): Promise<{ alreadyGone: boolean }> {
    const m = await this.mig(groupId, 'terminate instance');
    const mi = (await this.managedInstances(m)).find((x) => last(x.instance) === instanceId);
    if (!mi || LEAVING.has(mi.currentAction ?? '')) return { alreadyGone: true };
    await this.deleteInstances(m, [mi.instance!]);
    this.cache = undefined;
    return { alreadyGone: false };
  }

  async setScaleInProtection(groupId: string, instanceIds: readonly string[], protect: boolean): Promise<void> {
    const m = await this.mig(groupId, 'set scale-in protection');
    const members = new Map(
      (await this.managedInstances(m))
        .filter((mi) => mi.instance && !LEAVING.has(mi.currentAction ?? ''))
        .map((mi) => [last(mi.instance), mi]),
    );
    for (const id of instanceIds) {
      const mi = members.get(id);
      const zone = zoneOfUrl(mi?.instance);
      if (!mi || !zone) continue;
      let inst: GceInstance;
      try {
        [inst] = await this.c.instances.get({ project: m.project, zone, instance: id });
      } catch (error) {
        const e = translateGcpError(error, { operation: 'read instance', resource: `${m.project}/${zone}/${id}` });
        if (e.code === 'not-found') continue; // gone since the list
        throw e;
      }
      const labels = { ...(inst.labels ?? {}) };
      if ((labels[GCP_LABELS.protected] === 'true') === protect) continue;
      if (protect) labels[GCP_LABELS.protected] = 'true';
      else delete labels[GCP_LABELS.protected];
      const [op] = await this.call('set instance labels', `${m.project}/${zone}/${id}`, () =>
        this.c.instances.setLabels({
          project: m.project,
          zone,
          instance: id,
          instancesSetLabelsRequestResource: { labels, labelFingerprint: inst.labelFingerprint ?? '' },
        }),
      );
      await this.waitZone(m.project, zone, op.latestResponse as Operation, 'set instance labels');
    }
  }

  async launchFailures(sinceMs: number): Promise<LaunchFailure[]> {
    // A MIG keeps retrying a failed creation and shows the last attempt's errors on the instance.
    // They carry no time: a failure still shown now is reported as of now (or `sinceMs`, if later).
    const now = Math.max(this.options.clock.nowMs(), sinceMs);
    const out: LaunchFailure[] = [];
    for (const m of await this.migs()) {
      for (const mi of await this.managedInstances(m)) {
        const errors = mi.lastAttempt?.errors?.errors ?? [];
        if (errors.length === 0 || !CREATING.has(mi.currentAction ?? '')) continue;
        const zone = zoneOfUrl(mi.instance);
        const offering = m.group.offerings.find((o) => o.zone === zone);
        for (const e of errors) {
          out.push({
            groupId: m.id,
            ...(offering ? { offeringId: offering.id } : {}),
            atMs: now,
            code: e.code ?? 'LaunchFailed',
            message: e.message ?? e.code ?? 'launch failed',
          });
        }
      }
    }
    return out;
  }

  async completeLifecycleAction(): Promise<void> {
    // GCP has no lifecycle hooks; a MIG deletes a machine when asked. Nothing to complete.
  }

  // ---- operations -------------------------------------------------------------------------

  private async waitFor(m: Mig, op: Operation | undefined, what: string): Promise<void> {
    if (m.regional) await this.waitRegion(m.project, m.location, op, what);
    else await this.waitZone(m.project, m.location, op, what);
  }

  private async waitZone(project: string, zone: string, op: Operation | undefined, what: string): Promise<void> {
    await this.waitLoop(op, what, (name) => this.c.zoneOperations.wait({ project, zone, operation: name }).then(([o]) => o));
  }

  private async waitRegion(project: string, region: string, op: Operation | undefined, what: string): Promise<void> {
    await this.waitLoop(op, what, (name) => this.c.regionOperations.wait({ project, region, operation: name }).then(([o]) => o));
  }

  /** Waits (Compute's wait returns when the operation is done, or after about 2 minutes) and raises its errors. */
  private async waitLoop(op: Operation | undefined, what: string, wait: (name: string) => Promise<Operation>): Promise<void> {
    let current = op;
    const limit = this.options.clock.nowMs() + (this.options.operationTimeoutSec ?? 120) * 1000;
    for (let round = 0; current && current.status !== 'DONE'; round++) {
      if (round > 0 && this.options.clock.nowMs() > limit) {
        throw new CloudError(
          'unavailable',
          `GCP ${what}: operation ${current.name} still ${current.status} after ${this.options.operationTimeoutSec ?? 120} s; it goes on in the cloud and the next reconcile will see its result`,
          { operation: what, resource: current.targetLink ?? '', cloud: 'gcp' },
        );
      }
      if (round >= 10) break;
      const name = current.name ?? '';
      current = await this.call(`wait for ${what}`, name, () => wait(name));
    }
    const failed = current ? operationError(current, { operation: what, resource: last(current.targetLink) }) : undefined;
    if (failed) throw failed;
  }

  private async call<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (error) {
      throw translateGcpError(error, { operation, resource });
    }
  }
}

/** `key=value` words in a MIG's description. */
function descriptionWords(description: string | null | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of (description ?? '').matchAll(/([a-z][a-z0-9-]*)=([^\s,;]+)/g)) out.set(m[1]!, m[2]!);
  return out;
}

/** gpu-fleet's state of a managed instance, from the MIG's current action and the instance status. */
export function stateOf(mi: ManagedInstance): InstanceState {
  const action = mi.currentAction ?? 'NONE';
  const status = mi.instanceStatus ?? '';
  if (action === 'DELETING' || action === 'ABANDONING') return 'stopping';
  if (status === 'TERMINATED' || status === 'STOPPED' || status === 'SUSPENDED') return 'terminated';
  if (status === 'STOPPING' || status === 'SUSPENDING') return 'stopping';
  if (CREATING.has(action) || status === 'PROVISIONING' || status === 'STAGING' || status === '') return 'pending';
  return status === 'RUNNING' ? 'running' : 'pending';
}
