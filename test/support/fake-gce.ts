import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';

/**
 * A local Compute Engine REST server (v1) for the GCP adapter's tests: the endpoints gpu-fleet
 * calls, with the field names of the Compute API reference and real recorded bodies as the base
 * shapes (test/fixtures/api/gcp). It keeps managed instance groups (zonal and regional), their
 * instances, instance templates and zone operations; paginates with `maxResults`/`pageToken`;
 * answers errors with Compute's JSON envelope; and can inject faults (403, 404, 429, quota) and
 * stockouts. Mutations return an operation that is RUNNING until waited on.
 */

const FIXTURES = resolve(import.meta.dirname, '../fixtures/api/gcp');
export const gceFixture = (name: string): Record<string, unknown> =>
  JSON.parse(readFileSync(resolve(FIXTURES, name), 'utf8')) as Record<string, unknown>;

const BASE = 'https://www.googleapis.com/compute/v1';

interface FakeInstance {
  name: string;
  id: string;
  zone: string;
  creationTimestamp: string;
  labels: Record<string, string>;
  labelFingerprint: string;
  status: string;
  currentAction: string;
  errors?: { code: string; message: string }[];
  spot: boolean;
  terminationAction: string;
}

interface FakeMig {
  project: string;
  name: string;
  zone?: string;
  region?: string;
  zones: string[];
  template: string;
  targetSize: number;
  description: string;
  instances: Map<string, FakeInstance>;
}

interface FakeOp {
  name: string;
  project: string;
  zone?: string;
  region?: string;
  operationType: string;
  targetLink: string;
  status: 'PENDING' | 'RUNNING' | 'DONE';
  insertTime: string;
  error?: { errors: { code: string; message: string }[] };
  httpErrorStatusCode?: number;
}

interface Fault {
  readonly method?: string;
  readonly path: RegExp;
  remaining: number;
  readonly status: number;
  readonly body: unknown;
}

export class FakeGce {
  private server: Server | undefined;
  port = 0;
  nowMs = Date.UTC(2026, 10, 30, 12, 0, 0);
  readonly templates = new Map<string, Record<string, unknown>>();
  /** Machine types by name (the same in every zone), from the recorded and assembled fixtures. */
  readonly machineTypes = new Map<string, Record<string, unknown>>(
    [
      'machineTypes-get-a2-highgpu-1g.json',
      'machineTypes-get-a3-highgpu-8g.assembled.json',
      'machineTypes-get-g2-standard-8.assembled.json',
    ].map((f) => {
      const m = gceFixture(f);
      return [String(m.name), m];
    }),
  );
  readonly migs = new Map<string, FakeMig>();
  readonly ops = new Map<string, FakeOp>();
  /** Zones out of capacity: new machines there stay CREATING with a stockout error. */
  readonly stockouts = new Set<string>();
  /** Every request, as "METHOD path?query". */
  readonly requests: string[] = [];
  private faults: Fault[] = [];
  /** Largest page the server returns (Compute caps maxResults at 500). */
  pageSize = 500;
  private seq = 0;

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  async stop(): Promise<void> {
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  /** An instance template, from the recorded GPU spot template with the given machine type, provisioning and labels. */
  addTemplate(
    project: string,
    name: string,
    o: {
      machineType: string;
      spot: boolean;
      labels?: Record<string, string>;
      accelerators?: { acceleratorType: string; acceleratorCount: number }[];
      terminationAction?: 'STOP' | 'DELETE';
      /** Consume this specific reservation (reservationAffinity SPECIFIC_RESERVATION by name). */
      reservation?: string;
    },
  ): void {
    const t = structuredClone(gceFixture('instanceTemplates-get-gpu-spot.assembled.json')) as {
      name: string;
      selfLink: string;
      properties: Record<string, unknown>;
    };
    t.name = name;
    t.selfLink = `${BASE}/projects/${project}/global/instanceTemplates/${name}`;
    t.properties.machineType = o.machineType;
    t.properties.guestAccelerators = o.accelerators ?? [];
    t.properties.labels = o.labels ?? {};
    t.properties.scheduling = o.spot
      ? {
          onHostMaintenance: 'TERMINATE',
          automaticRestart: false,
          provisioningModel: 'SPOT',
          instanceTerminationAction: o.terminationAction ?? 'STOP',
        }
      : { onHostMaintenance: 'TERMINATE', automaticRestart: true, provisioningModel: 'STANDARD' };
    if (o.reservation)
      t.properties.reservationAffinity = {
        consumeReservationType: 'SPECIFIC_RESERVATION',
        key: 'compute.googleapis.com/reservation-name',
        values: [o.reservation],
      };
    this.templates.set(`${project}/${name}`, t as unknown as Record<string, unknown>);
  }

  /** Reservations by project and zone, in the Reservation resource's shape (assembled from the Compute API reference). */
  readonly reservations = new Map<string, Record<string, unknown>[]>();

  addReservation(
    project: string,
    zone: string,
    name: string,
    o: { machineType: string; count: number; inUseCount: number; status?: string },
  ): void {
    const list = this.reservations.get(`${project}/${zone}`) ?? [];
    list.push({
      kind: 'compute#reservation',
      id: String(4_100_000_000_000_000_000 + list.length),
      creationTimestamp: '2026-11-01T08:00:00.000-07:00',
      selfLink: `${BASE}/projects/${project}/zones/${zone}/reservations/${name}`,
      zone: `${BASE}/projects/${project}/zones/${zone}`,
      name,
      // int64 fields travel as strings in Compute's JSON.
      specificReservation: {
        instanceProperties: { machineType: o.machineType, guestAccelerators: [] },
        count: String(o.count),
        inUseCount: String(o.inUseCount),
      },
      specificReservationRequired: true,
      status: o.status ?? 'READY',
      shareSettings: { shareType: 'LOCAL' },
    });
    this.reservations.set(`${project}/${zone}`, list);
  }

  addMig(o: {
    project: string;
    name: string;
    zone?: string;
    region?: string;
    zones?: string[];
    template: string;
    targetSize?: number;
    description?: string;
  }): void {
    const zones = o.zone ? [o.zone] : (o.zones ?? []);
    const mig: FakeMig = {
      project: o.project,
      name: o.name,
      zones,
      template: o.template,
      targetSize: 0,
      description: o.description ?? '',
      instances: new Map(),
      ...(o.zone ? { zone: o.zone } : { region: o.region! }),
    };
    this.migs.set(this.migKey(o.project, o.zone ?? o.region!, o.name), mig);
    this.grow(mig, o.targetSize ?? 0);
    this.settle();
  }

  /** The next `times` requests matching `path` (and method) fail with `status` and `body`. */
  fail(path: RegExp, status: number, body: unknown, times = 1, method?: string): void {
    this.faults.push({ path, status, body, remaining: times, ...(method ? { method } : {}) });
  }

  /** Machines being created come up (outside a stockout); machines being deleted go. */
  settle(): void {
    for (const mig of this.migs.values()) {
      for (const [name, i] of mig.instances) {
        if (i.currentAction === 'DELETING') mig.instances.delete(name);
        else if (i.currentAction === 'CREATING' && !this.stockouts.has(i.zone))
          Object.assign(i, { currentAction: 'NONE', status: 'RUNNING', errors: undefined });
      }
    }
  }

  /** Preempts a spot machine: a `compute.instances.preempted` system operation, and the machine stopped (or deleted). */
  preempt(instanceName: string, { recordOperation = true } = {}): void {
    for (const mig of this.migs.values()) {
      const i = mig.instances.get(instanceName);
      if (!i) continue;
      if (i.terminationAction === 'DELETE') {
        mig.instances.delete(instanceName);
        mig.targetSize -= 0; // the MIG recreates it: target unchanged
        this.grow(mig, 1, true);
      } else Object.assign(i, { status: 'TERMINATED', currentAction: 'NONE' });
      if (recordOperation) {
        const name = `systemevent-${this.nowMs}-${++this.seq}`;
        this.ops.set(`${mig.project}/${i.zone}/${name}`, {
          name,
          project: mig.project,
          zone: i.zone,
          operationType: 'compute.instances.preempted',
          targetLink: `${BASE}/projects/${mig.project}/zones/${i.zone}/instances/${instanceName}`,
          status: 'DONE',
          insertTime: new Date(this.nowMs).toISOString(),
        });
      }
      return;
    }
    throw new Error(`no instance ${instanceName}`);
  }

  instance(name: string): FakeInstance | undefined {
    for (const mig of this.migs.values()) if (mig.instances.has(name)) return mig.instances.get(name);
    return undefined;
  }

  // ---- internals ----------------------------------------------------------------------------

  private migKey(project: string, location: string, name: string): string {
    return `${project}/${location}/${name}`;
  }

  private grow(mig: FakeMig, n: number, replacing = false): void {
    const t = this.templates.get(`${mig.project}/${last(mig.template)}`);
    const props = (t?.properties ?? {}) as {
      labels?: Record<string, string>;
      scheduling?: { provisioningModel?: string; instanceTerminationAction?: string };
    };
    for (let k = 0; k < n; k++) {
      const zone = mig.zones[mig.instances.size % mig.zones.length]!;
      const name = `${mig.name}-${(++this.seq).toString(36).padStart(4, '0')}`;
      const stockout = this.stockouts.has(zone);
      mig.instances.set(name, {
        name,
        id: String(1_000_000_000 + this.seq),
        zone,
        creationTimestamp: new Date(this.nowMs).toISOString(),
        labels: { ...(props.labels ?? {}) },
        labelFingerprint: `fp-${this.seq}`,
        status: stockout ? '' : 'PROVISIONING',
        currentAction: 'CREATING',
        spot: props.scheduling?.provisioningModel === 'SPOT',
        terminationAction: props.scheduling?.instanceTerminationAction ?? 'STOP',
        ...(stockout
          ? {
              errors: [
                {
                  code: 'ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS',
                  message: `Instance '${name}' creation failed: The zone 'projects/${mig.project}/zones/${zone}' does not have enough resources available to fulfill the request.  'NULL:0/NULL:0/NULL:0 (state:STOCKOUT, sub-state:STOCKOUT, resource type:compute)'.`,
                },
              ],
            }
          : {}),
      });
    }
    if (!replacing) mig.targetSize += n;
  }

  private op(project: string, where: { zone?: string; region?: string }, operationType: string, targetLink: string): FakeOp {
    const name = `operation-${this.nowMs}-${++this.seq}`;
    const op: FakeOp = {
      name,
      project,
      ...where,
      operationType,
      targetLink,
      status: 'RUNNING',
      insertTime: new Date(this.nowMs).toISOString(),
    };
    this.ops.set(`${project}/${where.zone ?? where.region}/${name}`, op);
    return op;
  }

  private opJson(op: FakeOp): Record<string, unknown> {
    const loc = op.zone
      ? { zone: `${BASE}/projects/${op.project}/zones/${op.zone}` }
      : { region: `${BASE}/projects/${op.project}/regions/${op.region}` };
    return {
      kind: 'compute#operation',
      id: String(7_000_000_000 + this.seq),
      name: op.name,
      ...loc,
      operationType: op.operationType,
      targetLink: op.targetLink,
      status: op.status,
      progress: op.status === 'DONE' ? 100 : 0,
      insertTime: op.insertTime,
      ...(op.error ? { error: op.error, httpErrorStatusCode: op.httpErrorStatusCode ?? 400 } : {}),
      selfLink: `${BASE}/projects/${op.project}/${op.zone ? `zones/${op.zone}` : `regions/${op.region}`}/operations/${op.name}`,
    };
  }

  private migJson(m: FakeMig): Record<string, unknown> {
    const base = structuredClone((gceFixture('instanceGroupManagers-list.json').items as Record<string, unknown>[])[0]!);
    const where = m.zone ? `zones/${m.zone}` : `regions/${m.region}`;
    const templateUrl = `${BASE}/projects/${m.project}/global/instanceTemplates/${last(m.template)}`;
    delete base.zone;
    Object.assign(base, {
      name: m.name,
      description: m.description,
      ...(m.zone
        ? { zone: `${BASE}/projects/${m.project}/zones/${m.zone}` }
        : {
            region: `${BASE}/projects/${m.project}/regions/${m.region}`,
            distributionPolicy: { zones: m.zones.map((z) => ({ zone: `${BASE}/projects/${m.project}/zones/${z}` })), targetShape: 'EVEN' },
          }),
      instanceTemplate: templateUrl,
      versions: [{ instanceTemplate: templateUrl, targetSize: { calculated: m.targetSize } }],
      instanceGroup: `${BASE}/projects/${m.project}/${where}/instanceGroups/${m.name}`,
      baseInstanceName: m.name,
      targetSize: m.targetSize,
      selfLink: `${BASE}/projects/${m.project}/${where}/instanceGroupManagers/${m.name}`,
    });
    (base.status as Record<string, unknown>).autoscaler = undefined;
    return base;
  }

  private managedJson(m: FakeMig, i: FakeInstance): Record<string, unknown> {
    return {
      instance: `${BASE}/projects/${m.project}/zones/${i.zone}/instances/${i.name}`,
      id: i.id,
      ...(i.status ? { instanceStatus: i.status } : {}),
      currentAction: i.currentAction,
      version: { instanceTemplate: `${BASE}/projects/${m.project}/global/instanceTemplates/${last(m.template)}` },
      ...(i.errors ? { lastAttempt: { errors: { errors: i.errors } } } : {}),
    };
  }

  private instanceJson(project: string, i: FakeInstance): Record<string, unknown> {
    return {
      kind: 'compute#instance',
      id: i.id,
      name: i.name,
      creationTimestamp: i.creationTimestamp,
      zone: `${BASE}/projects/${project}/zones/${i.zone}`,
      status: i.status || 'PROVISIONING',
      labels: i.labels,
      labelFingerprint: i.labelFingerprint,
      scheduling: i.spot
        ? { provisioningModel: 'SPOT', instanceTerminationAction: i.terminationAction }
        : { provisioningModel: 'STANDARD' },
      selfLink: `${BASE}/projects/${project}/zones/${i.zone}/instances/${i.name}`,
    };
  }

  private page<T>(items: T[], url: URL): { items: T[]; nextPageToken?: string } {
    const max = Math.min(Number(url.searchParams.get('maxResults') ?? 500), this.pageSize);
    const start = Number(url.searchParams.get('pageToken') ?? 0);
    const slice = items.slice(start, start + max);
    return { items: slice, ...(start + max < items.length ? { nextPageToken: String(start + max) } : {}) };
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body = '';
    for await (const chunk of req) body += String(chunk);
    const url = new URL(req.url ?? '/', 'http://localhost');
    this.requests.push(`${req.method} ${url.pathname}${url.search}`);
    const send = (status: number, json: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json; charset=UTF-8' });
      res.end(JSON.stringify(json));
    };
    const fault = this.faults.find((f) => f.remaining > 0 && f.path.test(url.pathname) && (!f.method || f.method === req.method));
    // maxResults: 0 to 500 inclusive (Compute API reference, every list method); anything else is 400 invalid.
    const maxResults = url.searchParams.get('maxResults');
    if (maxResults !== null && !(/^\d+$/.test(maxResults) && Number(maxResults) <= 500))
      return send(400, {
        error: {
          code: 400,
          message: `Invalid value for field 'maxResults': '${maxResults}'. Must be less than or equal to 500`,
          errors: [
            {
              message: `Invalid value for field 'maxResults': '${maxResults}'. Must be less than or equal to 500`,
              domain: 'global',
              reason: 'invalid',
            },
          ],
        },
      });
    if (fault) {
      fault.remaining--;
      return send(fault.status, fault.body);
    }
    const notFound = (what: string) =>
      send(404, {
        error: {
          code: 404,
          message: `The resource '${what}' was not found`,
          errors: [{ message: `The resource '${what}' was not found`, domain: 'global', reason: 'notFound' }],
        },
      });
    const p = url.pathname.replace(/^\/compute\/v1\/projects\//, '').split('/');
    const project = p[0]!;
    const rest = p.slice(1);
    const route = rest.join('/');
    let m: RegExpExecArray | null;

    if (route === 'aggregated/instanceGroupManagers' && req.method === 'GET') {
      const all = [...this.migs.values()]
        .filter((x) => x.project === project)
        .map((x) => ({ key: x.zone ? `zones/${x.zone}` : `regions/${x.region}`, mig: x }));
      const pg = this.page(all, url);
      const items: Record<string, unknown> = {};
      for (const { key, mig } of pg.items)
        ((items[key] ??= { instanceGroupManagers: [] }) as { instanceGroupManagers: unknown[] }).instanceGroupManagers.push(
          this.migJson(mig),
        );
      items['zones/us-east1-b'] ??= {
        warning: {
          code: 'NO_RESULTS_ON_PAGE',
          message: "There are no results for scope 'zones/us-east1-b' on this page.",
          data: [{ key: 'scope', value: 'zones/us-east1-b' }],
        },
      };
      return send(200, {
        kind: 'compute#instanceGroupManagerAggregatedList',
        id: `projects/${project}/aggregated/instanceGroupManagers`,
        items,
        ...(pg.nextPageToken ? { nextPageToken: pg.nextPageToken } : {}),
        selfLink: `${BASE}/projects/${project}/aggregated/instanceGroupManagers`,
      });
    }
    if ((m = /^zones\/([^/]+)\/reservations$/.exec(route)) && req.method === 'GET') {
      const pg = this.page(this.reservations.get(`${project}/${m[1]}`) ?? [], url);
      return send(200, {
        kind: 'compute#reservationList',
        id: `projects/${project}/zones/${m[1]}/reservations`,
        items: pg.items,
        ...(pg.nextPageToken ? { nextPageToken: pg.nextPageToken } : {}),
        selfLink: `${BASE}/projects/${project}/zones/${m[1]}/reservations`,
      });
    }
    if ((m = /^zones\/([^/]+)\/machineTypes\/([^/]+)$/.exec(route)) && req.method === 'GET') {
      const mt = this.machineTypes.get(m[2]!);
      if (!mt) return notFound(`projects/${project}/zones/${m[1]}/machineTypes/${m[2]}`);
      return send(200, { ...mt, zone: m[1] });
    }
    if ((m = /^global\/instanceTemplates\/([^/]+)$/.exec(route)) && req.method === 'GET') {
      const t = this.templates.get(`${project}/${m[1]}`);
      if (!t) return send(404, gceFixture('error-404-notFound-instanceTemplate.json'));
      return send(200, t);
    }
    if ((m = /^(zones|regions)\/([^/]+)\/instanceGroupManagers\/([^/]+)(?:\/(\w+))?$/.exec(route))) {
      const [, scope, location, name, verb] = m;
      const mig = this.migs.get(this.migKey(project, location!, name!));
      if (!mig) return notFound(`projects/${project}/${scope}/${location}/instanceGroupManagers/${name}`);
      const where = scope === 'zones' ? { zone: location! } : { region: location! };
      const self = `${BASE}/projects/${project}/${scope}/${location}/instanceGroupManagers/${name}`;
      if (!verb && req.method === 'GET') return send(200, this.migJson(mig));
      if (verb === 'resize' && req.method === 'POST') {
        const size = Number(url.searchParams.get('size'));
        if (!Number.isInteger(size) || size < 0)
          return send(400, {
            error: {
              code: 400,
              message: `Invalid value for field 'size': '${url.searchParams.get('size')}'. Must be greater than or equal to 0.`,
              errors: [{ message: 'Invalid value', domain: 'global', reason: 'invalid' }],
            },
          });
        if (size > mig.targetSize) this.grow(mig, size - mig.targetSize);
        else {
          const victims = [...mig.instances.values()].filter((i) => i.currentAction !== 'DELETING').slice(size);
          for (const v of victims) v.currentAction = 'DELETING';
          mig.targetSize = size;
        }
        return send(200, this.opJson(this.op(project, where, 'compute.instanceGroupManagers.resize', self)));
      }
      if (verb === 'deleteInstances' && req.method === 'POST') {
        const { instances, skipInstancesOnValidationError } = JSON.parse(body || '{}') as {
          instances?: string[];
          skipInstancesOnValidationError?: boolean;
        };
        const names = (instances ?? []).map(last);
        const missing = names.filter((n) => !mig.instances.has(n));
        if (missing.length > 0 && !skipInstancesOnValidationError) {
          return send(400, {
            error: {
              code: 400,
              message: `The resource 'projects/${project}/zones/${mig.zones[0]}/instances/${missing[0]}' is not a member of the managed instance group.`,
              errors: [{ message: 'not a member', domain: 'global', reason: 'invalid' }],
            },
          });
        }
        for (const n of names) {
          const i = mig.instances.get(n);
          if (i && i.currentAction !== 'DELETING') {
            i.currentAction = 'DELETING';
            mig.targetSize--;
          }
        }
        return send(200, this.opJson(this.op(project, where, 'compute.instanceGroupManagers.deleteInstances', self)));
      }
      if (verb === 'listManagedInstances' && req.method === 'POST') {
        const pg = this.page([...mig.instances.values()], url);
        return send(200, {
          managedInstances: pg.items.map((i) => this.managedJson(mig, i)),
          ...(pg.nextPageToken ? { nextPageToken: pg.nextPageToken } : {}),
        });
      }
    }
    if ((m = /^zones\/([^/]+)\/instances(?:\/([^/]+))?(?:\/(setLabels))?$/.exec(route))) {
      const [, zone, name, verb] = m;
      const inZone = [...this.migs.values()]
        .filter((x) => x.project === project)
        .flatMap((x) => [...x.instances.values()])
        .filter((i) => i.zone === zone);
      if (!name && req.method === 'GET') {
        const pg = this.page(inZone, url);
        return send(200, {
          kind: 'compute#instanceList',
          items: pg.items.map((i) => this.instanceJson(project, i)),
          ...(pg.nextPageToken ? { nextPageToken: pg.nextPageToken } : {}),
        });
      }
      const inst = inZone.find((i) => i.name === name);
      if (!inst) return notFound(`projects/${project}/zones/${zone}/instances/${name}`);
      if (!verb && req.method === 'GET') return send(200, this.instanceJson(project, inst));
      if (verb === 'setLabels' && req.method === 'POST') {
        const { labels, labelFingerprint } = JSON.parse(body || '{}') as { labels?: Record<string, string>; labelFingerprint?: string };
        if (labelFingerprint !== inst.labelFingerprint) {
          return send(412, {
            error: {
              code: 412,
              message: 'Labels fingerprint either invalid or resource labels have changed',
              errors: [
                {
                  message: 'Labels fingerprint either invalid or resource labels have changed',
                  domain: 'global',
                  reason: 'conditionNotMet',
                  location: 'If-Match',
                  locationType: 'header',
                },
              ],
            },
          });
        }
        inst.labels = { ...(labels ?? {}) };
        inst.labelFingerprint = `fp-${++this.seq}`;
        return send(
          200,
          this.opJson(this.op(project, { zone: zone! }, 'setLabels', `${BASE}/projects/${project}/zones/${zone}/instances/${name}`)),
        );
      }
    }
    if ((m = /^(zones|regions)\/([^/]+)\/operations\/([^/]+)\/wait$/.exec(route)) && req.method === 'POST') {
      const op = this.ops.get(`${project}/${m[2]}/${m[3]}`);
      if (!op) return notFound(`projects/${project}/${m[1]}/${m[2]}/operations/${m[3]}`);
      op.status = 'DONE';
      return send(200, this.opJson(op));
    }
    if ((m = /^zones\/([^/]+)\/operations$/.exec(route)) && req.method === 'GET') {
      const filter = url.searchParams.get('filter') ?? '';
      const type = /operationType\s*=\s*"([^"]+)"/.exec(filter)?.[1];
      const after = /insertTime\s*>\s*"([^"]+)"/.exec(filter)?.[1];
      const list = [...this.ops.values()]
        .filter((o) => o.project === project && o.zone === m![1])
        .filter((o) => (!type || o.operationType === type) && (!after || Date.parse(o.insertTime) > Date.parse(after)));
      const pg = this.page(list, url);
      return send(200, {
        kind: 'compute#operationList',
        id: `projects/${project}/zones/${m[1]}/operations`,
        ...(pg.items.length > 0 ? { items: pg.items.map((o) => this.opJson(o)) } : {}),
        ...(pg.nextPageToken ? { nextPageToken: pg.nextPageToken } : {}),
      });
    }
    return send(404, {
      error: {
        code: 404,
        message: `fake-gce: no route for ${req.method} ${url.pathname}`,
        errors: [{ message: 'no route', domain: 'global', reason: 'notFound' }],
      },
    });
  }
}

function last(url: string): string {
  return url.split('/').pop() ?? '';
}
